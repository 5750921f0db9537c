"""`manage.py export_servers`: write the registry's servers as Toolroom YAML or mcp.json."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry.servers.importing import EXPORT_FORMATS, export_servers
from registry.servers.models import McpServer


class Command(BaseCommand):
    help = (
        "Export MCP servers as Toolroom YAML (imports back with import_servers) or as a Claude "
        "Desktop style mcp.json. Env and header values are left out unless --include-secrets."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "slugs", nargs="*", metavar="SLUG", help="Export only these servers (default: all)."
        )
        parser.add_argument("--format", choices=EXPORT_FORMATS, default="yaml")
        parser.add_argument(
            "--include-secrets",
            action="store_true",
            help="Write env and header values in clear text.",
        )
        parser.add_argument(
            "--output", "-o", metavar="PATH", help="Write to this file (default: standard output)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slugs: list[str] = options["slugs"]
        servers = None
        if slugs:
            found = list(McpServer.objects.select_related("category").filter(slug__in=slugs))
            missing = sorted(set(slugs) - {server.slug for server in found})
            if missing:
                raise CommandError(f"No server with the slug: {', '.join(missing)}.")
            servers = found
        text = export_servers(
            format=options["format"], include_secrets=options["include_secrets"], servers=servers
        )
        if options["include_secrets"]:
            self.stderr.write("Warning: the export contains secrets in clear text.")
        output: str | None = options["output"]
        if not output:
            self.stdout.write(text, ending="")
            return
        path = Path(output)
        try:
            # Owner-only from the first byte when secrets are in it.
            mode = 0o600 if options["include_secrets"] else 0o644
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "w", encoding="utf-8") as stream:
                if options["include_secrets"]:
                    os.fchmod(stream.fileno(), 0o600)  # an existing file keeps its mode otherwise
                stream.write(text)
        except OSError as exc:
            raise CommandError(f"Cannot write {path}: {exc.strerror or exc}.") from exc
        count = len(servers) if servers is not None else McpServer.objects.count()
        self.stderr.write(f"Exported {count} server(s) to {path}.")
