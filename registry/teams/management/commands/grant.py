"""`manage.py grant --team SLUG --server SLUG [--tool NAME] [--role NAME] [--expires ISO-8601]
[--revoke]`: grant (or revoke) a server or one tool to a team, through the services."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from registry.core.errors import ApplicationError
from registry.servers.models import McpServer, Tool
from registry.teams.models import Grant, Team, TeamRole
from registry.teams.services import grant_create, grant_revoke


def parse_expiry(value: str | None) -> datetime | None:
    if not value:
        return None
    moment = parse_datetime(value)
    if moment is None:
        raise CommandError(f"--expires {value!r} is not an ISO-8601 date and time.")
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


class Command(BaseCommand):
    help = "Grant a server (all its approved tools) or one tool to a team, or revoke the grant."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True)
        parser.add_argument("--server", required=True)
        parser.add_argument("--tool")
        parser.add_argument("--role", help="Only agents of this role (default: every role).")
        parser.add_argument("--expires", help="ISO-8601, e.g. 2030-01-31T18:00:00Z.")
        parser.add_argument("--note", default="")
        parser.add_argument("--revoke", action="store_true")
        parser.add_argument("--reason", default="", help="With --revoke: why.")

    def handle(self, *args: Any, **options: Any) -> None:
        team = Team.objects.filter(slug=options["team"]).first()
        if team is None:
            raise CommandError(f"No team {options['team']!r}.")
        server = McpServer.objects.filter(slug=options["server"]).first()
        if server is None:
            raise CommandError(f"No server {options['server']!r}.")
        tool = None
        if options["tool"]:
            tool = Tool.objects.filter(server=server, name=options["tool"]).first()
            if tool is None:
                raise CommandError(f"{server.slug} has no tool {options['tool']!r}.")
        role = None
        if options["role"]:
            role = TeamRole.objects.filter(team=team, name=options["role"]).first()
            if role is None:
                raise CommandError(f"{team.slug} has no role {options['role']!r}.")
        what = f"{server.slug}/{tool.name}" if tool else server.slug
        try:
            if options["revoke"]:
                grant = Grant.objects.filter(
                    team=team, server=server, tool=tool, role=role, revoked_at__isnull=True
                ).first()
                if grant is None:
                    raise CommandError(f"{team.slug} has no such grant of {what}.")
                grant_revoke(actor="cli", grant=grant, reason=options["reason"])
                self.stdout.write(f"Revoked {team.slug}'s grant of {what}.")
                return
            grant = grant_create(
                actor="cli",
                team=team,
                server=server,
                tool=tool,
                role=role,
                expires_at=parse_expiry(options["expires"]),
                note=options["note"],
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        until = grant.expires_at.isoformat() if grant.expires_at else "no expiry"
        self.stdout.write(f"Granted {what} to {team.slug} ({until}).")
