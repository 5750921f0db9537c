"""`manage.py load_demo_teams`: a demo team, its grants and an agent token (idempotent).

Grants go to whichever approved demo servers exist (`load_demo` imports them). The demo agent's
token is kept in TOOLROOM_DATA_DIR/demo-agent-token (mode 0600) and printed, so `make run` and
the README's curl examples can use it; running the command again reuses it while it still works.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from registry.servers.models import McpServer, ReviewStatus
from registry.teams.models import AgentToken, Grant, Team, TeamRole
from registry.teams.services import (
    agent_token_create,
    agent_token_revoke,
    grant_create,
    team_create,
)
from registry.teams.tokens import TokenRejected, token_authenticate

DEMO_TEAM = "demo"
DEMO_AGENT = "demo-agent"
DEMO_ROLE = "operations"
DEMO_SERVERS = ("time", "git", "fetch", "filesystem", "memory", "everything")
TOKEN_FILE = "demo-agent-token"  # noqa: S105 (a file name)


def _write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(value + "\n")
    path.chmod(0o600)


class Command(BaseCommand):
    help = "Create the demo team, grant it the approved demo servers, and give it an agent token."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--token-file",
            default="",
            help=f"Where the demo token is kept (default: TOOLROOM_DATA_DIR/{TOKEN_FILE}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        team = Team.objects.filter(slug=DEMO_TEAM).first() or team_create(
            actor="demo",
            slug=DEMO_TEAM,
            name="Demo team",
            description="Made by load_demo_teams for trying Toolroom out.",
        )
        role = TeamRole.objects.get(team=team, name=DEMO_ROLE)
        granted = []
        for server in McpServer.objects.filter(slug__in=DEMO_SERVERS).exclude(
            review_status__in=[ReviewStatus.RETIRED, ReviewStatus.REJECTED]
        ):
            if not Grant.objects.filter(
                team=team, server=server, tool=None, role=None, revoked_at__isnull=True
            ).exists():
                grant_create(actor="demo", team=team, server=server, note="Demo grant.")
            granted.append(f"{server.slug} ({server.review_status})")
        servers = ", ".join(granted) or "no demo servers yet (run load_demo first)"
        self.stderr.write(f"Team {team.slug}: grants on {servers}.")
        path = Path(options["token_file"] or settings.DATA_DIR / TOKEN_FILE)
        plain = self._usable_token(path, team)
        if plain is None:
            for stale in AgentToken.objects.filter(
                team=team, name=DEMO_AGENT, revoked_at__isnull=True
            ):
                agent_token_revoke(actor="demo", token=stale, reason="Replaced by load_demo_teams.")
            plain = agent_token_create(
                actor="demo",
                team=team,
                role=role,
                name=DEMO_AGENT,
                declared_servers={"required": ["time"], "recommended": ["git"]},
            ).plain
            _write_secret(path, plain)
            self.stderr.write(f"Created the demo agent token; kept in {path}.")
        self.stdout.write(plain)

    def _usable_token(self, path: Path, team: Team) -> str | None:
        if not path.exists():
            return None
        plain = path.read_text().strip()
        try:
            identity = token_authenticate(plain)
        except TokenRejected:
            return None
        return plain if identity.team_id == team.pk else None
