"""`manage.py import_servers PATH`: import servers from mcp.json, server.json or Toolroom YAML."""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry.servers.importing import (
    FORMATS,
    ImportFileError,
    ImportOptions,
    import_apply,
    import_plan,
    read_limited,
)
from registry.servers.importing.report import plan_lines, problem_lines
from registry.servers.policy import TrustTier


def cli_actor() -> str:
    """The audit label for whoever runs a command: cli:<operating system user>."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no passwd entry, e.g. an arbitrary uid in a container
        user = os.environ.get("USER") or str(os.getuid())
    return f"cli:{user}"


class Command(BaseCommand):
    help = (
        "Import MCP servers from an mcp.json (Claude Desktop, Claude Code, VS Code, Cursor), an "
        "official registry server.json, or a Toolroom YAML file. New servers start as drafts; "
        "servers that exist (same slug) are updated only with --update. A file with any bad "
        "entry writes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="The file to import, or - to read standard input.")
        parser.add_argument(
            "--format",
            choices=FORMATS,
            default="auto",
            help="The file's format (default: detect it).",
        )
        parser.add_argument(
            "--tier",
            choices=TrustTier.values,
            help="Vouch for a trust tier the file cannot say (e.g. builtin for "
            "programs installed on this host); applies to every server.",
        )
        parser.add_argument(
            "--category",
            metavar="SLUG",
            help="Put every imported server in this (existing) category.",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Show what would change and write nothing."
        )
        parser.add_argument(
            "--update",
            action="store_true",
            help="Let entries named like existing servers update them (the plan lists them).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: str = options["path"]
        content, filename = self._read(path)
        import_options = ImportOptions(
            format=options["format"],
            tier=options["tier"],
            category=options["category"],
            may_vouch_tier=True,  # whoever runs manage.py operates the installation
            dry_run=options["dry_run"],
        )
        try:
            plan = import_plan(content=content, filename=filename, options=import_options)
            self.stdout.write("\n".join(plan_lines(plan)))
            if import_options.dry_run:
                self.stdout.write("Dry run: nothing was written.")
                return
            if plan.updated_slugs and not options["update"]:
                names = ", ".join(f"'{slug}'" for slug in plan.updated_slugs)
                raise CommandError(
                    f"Nothing was imported: the file would update existing server(s) {names}. "
                    "Run the command again with --update to update them."
                )
            result = import_apply(plan=plan, actor=cli_actor())
        except ImportFileError as exc:
            self.stderr.write("\n".join(problem_lines(exc)))
            raise CommandError(
                f"{path} was not imported: fix the problems above and run the command again."
            ) from exc
        self.stdout.write(self.style.SUCCESS(result.summary()))

    def _read(self, path: str) -> tuple[bytes, str | None]:
        try:
            if path == "-":
                return read_limited(sys.stdin.buffer), None
            file = Path(path)
            with file.open("rb") as stream:
                return read_limited(stream, size=file.stat().st_size), file.name
        except ImportFileError as exc:
            raise CommandError(f"{path}: {' '.join(str(p) for p in exc.problems)}") from exc
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
