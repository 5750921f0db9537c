"""`manage.py lock_dependencies SLUG... | --all`: resolve and record package servers' whole
dependency trees (registry/servers/dependency_locks.py), through the same service as the admin.

A new lock of an approved server is a launch change: the server goes back to review, so a pin
moves only through review.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q

from registry.core.errors import ApplicationError
from registry.servers import services
from registry.servers.dependency_locks import dependencies_resolve, lock_matches, lock_summary
from registry.servers.management.commands.import_servers import cli_actor
from registry.servers.models import McpServer, PackageRegistry


class Command(BaseCommand):
    help = (
        "Resolve and record the whole dependency tree (versions and hashes) of package servers; "
        "their sandbox images are built from exactly that set."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slugs", nargs="*", metavar="SLUG")
        parser.add_argument(
            "--all", action="store_true", help="every PyPI or npm server without a lock"
        )
        parser.add_argument(
            "--as-of",
            default="release",
            help="'release' (default: the tree as it stood a day after the pinned version was "
            "released), 'now', or an ISO date",
        )
        parser.add_argument(
            "--force", action="store_true", help="resolve again even where a lock fits"
        )
        parser.add_argument("--dry-run", action="store_true", help="show, write nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        registries = Q(package_registry__in=[PackageRegistry.PYPI, PackageRegistry.NPM])
        if options["all"]:
            servers = list(McpServer.objects.filter(registries).order_by("slug"))
        elif options["slugs"]:
            servers = list(McpServer.objects.filter(slug__in=options["slugs"]).order_by("slug"))
            missing = set(options["slugs"]) - {s.slug for s in servers}
            if missing:
                raise CommandError(f"No server with the slug {', '.join(sorted(missing))}.")
        else:
            raise CommandError("Name server slugs, or --all.")
        as_of = self._as_of(options["as_of"])
        for server in servers:
            self._lock(server, as_of=as_of, force=options["force"], dry_run=options["dry_run"])

    def _as_of(self, value: str) -> datetime | None:
        if value == "release":
            return None
        if value == "now":
            return datetime.now().astimezone()
        try:
            return datetime.fromisoformat(value).astimezone()
        except ValueError as exc:
            raise CommandError(f"--as-of {value!r}: give release, now, or an ISO date.") from exc

    def _lock(
        self, server: McpServer, *, as_of: datetime | None, force: bool, dry_run: bool
    ) -> None:
        registry, identifier, version = (
            server.package_registry,
            server.package_identifier,
            server.package_version,
        )
        if registry not in (PackageRegistry.PYPI, PackageRegistry.NPM):
            self.stdout.write(f"{server.slug}: no PyPI or npm package; nothing to lock")
            return
        if (
            not force
            and as_of is None
            and lock_matches(
                server.package_lock, registry=registry, identifier=identifier, version=version
            )
        ):
            self.stdout.write(f"{server.slug}: locked already, {lock_summary(server.package_lock)}")
            return
        try:
            lock = dependencies_resolve(
                registry=registry, identifier=identifier, version=version, as_of=as_of
            )
            self.stdout.write(f"{server.slug}: {lock.summary()}")
            if dry_run:
                return
            updated = services.server_update(
                actor=cli_actor(), server=server, changes={"package_lock": lock.as_json()}
            )
        except ApplicationError as exc:
            raise CommandError(f"{server.slug}: {exc.message}") from exc
        if updated.review_status != server.review_status:
            self.stdout.write(f"{server.slug}: back to review (its dependencies moved)")
