"""`manage.py sandbox`: build the sandbox's images, remove orphans, show what runs on the engine.

More: docs/sandbox.md, "Module notes".
"""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from registry.servers.models import SandboxPreparationState
from workers.adapters.sandbox import (
    BASE_IMAGE,
    NODE_BASE_IMAGE,
    SandboxError,
    build_base_image,
    build_package_image,
    build_proxy_image,
    connect_engine,
    sandbox_status,
)
from workers.sandbox_preparation import prepare_sandbox
from workers.sandbox_pruning import describe_bytes, sandbox_images_prune
from workers.sandboxing import sandbox_installation, sandbox_janitor, sandbox_owner


def split_package(registry: str, text: str) -> tuple[str, str]:
    """'name==1.2' (PyPI) or 'name@1.2' / '@scope/name@1.2' (npm) -> (name, version)."""
    if registry == "pypi" and "==" in text:
        name, version = text.split("==", 1)
    elif registry == "npm" and "@" in text.lstrip("@"):
        name, version = text.rsplit("@", 1)
    else:
        example = "mcp-server-time==2026.10.19" if registry == "pypi" else "package@1.2.3"
        raise CommandError(f"Give the package with its pinned version, e.g. {example}.")
    return name.strip(), version.strip()


class Command(BaseCommand):
    help = "Build the sandbox's images, remove orphaned containers, show the sandbox's status."

    def add_arguments(self, parser: ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        base = actions.add_parser("build-base", help="Build the local Debian base image.")
        base.add_argument("--force", action="store_true", help="Rebuild even if it exists.")
        base.add_argument("--node", action="store_true", help="The Node.js base (npm servers).")
        base.add_argument("--mirror", help="Debian mirror (default: the one in apt's sources).")
        proxy = actions.add_parser("build-proxy", help="Build the egress proxy's image.")
        proxy.add_argument("--force", action="store_true")
        package = actions.add_parser("build-package", help="Build an image for a package.")
        package.add_argument("registry", choices=["pypi", "npm"])
        package.add_argument("package", help="name==version (PyPI) or name@version (npm)")
        package.add_argument("--force", action="store_true")
        janitor = actions.add_parser("janitor", help="Remove what dead workers left behind.")
        owner = janitor.add_mutually_exclusive_group()
        owner.add_argument(
            "--owner",
            default=None,
            help="Owner label (default: this worker's, TOOLROOM_SANDBOX_OWNER or the host name).",
        )
        owner.add_argument(
            "--all", action="store_true", help="Every owner's orphans (of this installation)."
        )
        actions.add_parser("status", help="Engine, images, containers and networks.")
        prune = actions.add_parser(
            "prune", help="Remove the server images no server uses (never the base images)."
        )
        prune.add_argument("--keep", type=int, help="Images kept per server (default: setting).")
        prune.add_argument(
            "--min-age-hours", type=float, help="Keep younger images (default: setting)."
        )
        prune.add_argument("--dry-run", action="store_true", help="Say what would go.")
        actions.add_parser(
            "prepare",
            help="Build the missing base images the registered sandboxed servers need, then "
            "discover those servers (progress on the Fleet status page).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            if action == "build-base":
                ref = build_base_image(
                    reference=NODE_BASE_IMAGE if options["node"] else BASE_IMAGE,
                    node=options["node"],
                    force=options["force"],
                    mirror=options["mirror"],
                    say=self._say,
                )
                self.stdout.write(f"{ref.reference} {ref.digest}")
            elif action == "build-proxy":
                ref = build_proxy_image(force=options["force"], say=self._say)
                self.stdout.write(f"{ref.reference} {ref.digest}")
            elif action == "build-package":
                name, version = split_package(options["registry"], options["package"])
                ref = build_package_image(
                    options["registry"], name, version, force=options["force"], say=self._say
                )
                commands = ", ".join(ref.commands) or "-"
                self.stdout.write(f"{ref.reference} {ref.digest} (commands: {commands})")
            elif action == "janitor":
                owner = None if options["all"] else options["owner"] or sandbox_owner()
                removed = sandbox_janitor(owner=owner)
                for line in removed:
                    self.stdout.write(f"removed {line}")
                self.stdout.write(f"{len(removed)} orphaned resource(s) removed.")
            elif action == "status":
                self._status()
            elif action == "prune":
                self._prune(options)
            elif action == "prepare":
                state = prepare_sandbox(say=self._say)
                if state == SandboxPreparationState.FAILED:
                    raise CommandError("The sandbox's images could not be built; see above.")
        except SandboxError as exc:
            raise CommandError(exc.message) from exc

    def _prune(self, options: dict[str, Any]) -> None:
        hours = options["min_age_hours"]
        report = sandbox_images_prune(
            keep_per_server=options["keep"],
            min_age=None if hours is None else timedelta(hours=hours),
            dry_run=options["dry_run"],
        )
        verb = "would remove" if options["dry_run"] else "removed"
        for image in report.removed:
            self.stdout.write(f"{verb} {image.reference} ({describe_bytes(image.unique_bytes)})")
        for reference, why in sorted(report.kept.items()):
            self.stdout.write(f"kept {reference}: {why}")
        self.stdout.write(
            f"{len(report.removed)} image(s) {verb}, {describe_bytes(report.bytes_freed)} "
            f"{'would be ' if options['dry_run'] else ''}freed."
        )

    def _say(self, line: str) -> None:
        self.stderr.write(line)

    def _status(self) -> None:
        engine = connect_engine()
        try:
            status = sandbox_status(installation=sandbox_installation(), engine=engine)
        finally:
            engine.close()
        self.stdout.write(f"engine: {status.engine}")
        for reference, digest in status.images.items():
            self.stdout.write(f"image {reference}: {digest or 'missing'}")
        for network in status.networks:
            self.stdout.write(f"network {network}")
        for c in status.containers:
            orphan = " ORPHANED" if c.orphaned else ""
            self.stdout.write(
                f"container {c.name}: server {c.server_key}, {c.role}, owner {c.owner}, "
                f"{c.status}{orphan}"
            )
        if not status.containers:
            self.stdout.write("no sandbox containers")
