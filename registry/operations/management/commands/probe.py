"""`manage.py probe worker|runtime|beat`: exit 0 if a process of that kind on this host wrote a
fresh heartbeat, 1 otherwise (the docker-compose healthchecks of workers and beat)."""

from __future__ import annotations

import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry.core.models import ProcessKind
from registry.operations.readiness import process_heartbeat_fresh


class Command(BaseCommand):
    help = "Exit 0 when a worker, runtime worker or beat on this host has a fresh heartbeat."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("kind", choices=[kind.value for kind in ProcessKind])
        parser.add_argument(
            "--any-host",
            action="store_true",
            help="accept a heartbeat from any host (default: this host only)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host = None if options["any_host"] else socket.gethostname()
        beat = process_heartbeat_fresh(kind=options["kind"], host=host)
        if beat is None:
            where = "any host" if host is None else host
            raise CommandError(f"no fresh {options['kind']} heartbeat from {where}")
        self.stdout.write(f"{beat.kind} {beat.name} alive (last heartbeat {beat.beat_at:%H:%M:%S})")
