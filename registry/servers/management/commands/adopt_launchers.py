"""`manage.py adopt_launchers`: store registered servers' npx/uvx/docker run commands as pinned
package or image references (what imports do for new files)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry.servers.importing.launcher_adoption import (
    server_launcher_adopt,
    servers_with_launcher_commands,
)
from registry.servers.management.commands.import_servers import cli_actor


class Command(BaseCommand):
    help = (
        "Turn the launcher commands of registered stdio servers (npx, pnpm dlx, bunx, uvx, uv "
        "tool run, pipx run, docker run) into package or image references the sandbox can run, "
        "pinning unpinned packages to the newest version their registry serves now."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slugs", nargs="*", help="Only these servers (default: all).")
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would change; write nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        servers = servers_with_launcher_commands()
        if options["slugs"]:
            wanted = set(options["slugs"])
            servers = [server for server in servers if server.slug in wanted]
            missing = wanted - {server.slug for server in servers}
            if missing:
                raise CommandError(
                    f"No stdio server without a package or image reference: "
                    f"{', '.join(sorted(missing))}."
                )
        actor = cli_actor()
        failed = 0
        changed = 0
        for server in servers:
            result = server_launcher_adopt(actor=actor, server=server, dry_run=options["dry_run"])
            if result.error:
                failed += 1
                self.stderr.write(f"! {server.slug}: {result.error}")
                continue
            if not result.changes:
                continue
            changed += 1
            verb = "would change" if options["dry_run"] else "changed"
            self.stdout.write(f"~ {server.slug}: {verb} {', '.join(sorted(result.changes))}")
            for name, value in sorted(result.changes.items()):
                shown = sorted(value) if name == "env" else value  # names only, never values
                self.stdout.write(f"      {name}: {shown}")
            for warning in result.warnings:
                self.stdout.write(f"      ! {warning}")
            if result.sent_back_to_review:
                self.stdout.write("      ! its launch spec changed: it is back in review")
        summary = f"{changed} server(s) {'to change' if options['dry_run'] else 'changed'}"
        self.stdout.write(f"{summary}, {failed} refused.")
        if failed:
            raise CommandError(f"{failed} server(s) could not be adopted; see above.")
