"""`manage.py create_agent_token --team SLUG --role NAME --name NAME`: prints the token once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry.core.errors import ApplicationError
from registry.teams.management.commands.grant import parse_expiry
from registry.teams.models import Team, TeamRole
from registry.teams.services import agent_token_create


class Command(BaseCommand):
    help = "Create an agent token for a team and role; the token is printed this once only."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True)
        parser.add_argument("--role", required=True)
        parser.add_argument("--name", required=True)
        parser.add_argument("--expires", help="ISO-8601, e.g. 2030-01-31T18:00:00Z.")
        parser.add_argument(
            "--require", action="append", default=[], help="A server slug the agent requires."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        team = Team.objects.filter(slug=options["team"]).first()
        if team is None:
            raise CommandError(f"No team {options['team']!r}.")
        role = TeamRole.objects.filter(team=team, name=options["role"]).first()
        if role is None:
            roles = ", ".join(team.roles.values_list("name", flat=True))
            raise CommandError(f"{team.slug} has no role {options['role']!r} (roles: {roles}).")
        try:
            created = agent_token_create(
                actor="cli",
                team=team,
                role=role,
                name=options["name"],
                expires_at=parse_expiry(options["expires"]),
                declared_servers={"required": options["require"]} if options["require"] else None,
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stderr.write(
            f"Created the agent token {created.token.name} ({team.slug}/{role.name}). "
            "Keep it now: it is not shown again."
        )
        self.stdout.write(created.plain)
