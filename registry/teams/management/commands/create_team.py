"""`manage.py create_team SLUG [--name NAME]`: a team with its group and default roles."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry.core.errors import ApplicationError
from registry.teams.services import team_create


class Command(BaseCommand):
    help = "Create a team (with the roles review, implementation and operations)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--description", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            team = team_create(
                actor="cli",
                slug=options["slug"],
                name=options["name"],
                description=options["description"],
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        roles = ", ".join(team.roles.values_list("name", flat=True))
        self.stdout.write(f"Created the team {team.slug} ({team.name}); roles: {roles}.")
