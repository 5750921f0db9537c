"""`manage.py access_report --team SLUG [--format csv|json]`: the auditors' export of every tool
the team's roles can use, with the grant and the approval behind each (from `team_access_report`).
"""

from __future__ import annotations

import csv
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from registry.access.explain import team_access_report
from registry.access.report import ACCESS_REPORT_COLUMNS, access_report_rows
from registry.teams.models import Team


class Command(BaseCommand):
    help = (
        "Export every tool the team can use (per role) with the grant and the approval behind "
        "each, as CSV (one row per role, tool and grant) or JSON (the full explanations)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", required=True, help="The team's slug.")
        parser.add_argument("--format", choices=("csv", "json"), default="csv")
        parser.add_argument("--role", help="Only this role of the team.")
        parser.add_argument(
            "--include-unavailable",
            action="store_true",
            help="Also list granted tools the role cannot use, with the rule that stops them.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        team = Team.objects.filter(slug=options["team"]).first()
        if team is None:
            raise CommandError(f"No team {options['team']!r}.")
        role_name = options["role"]
        if role_name and not team.roles.filter(name=role_name).exists():
            roles = ", ".join(team.roles.values_list("name", flat=True))
            raise CommandError(f"{team.slug} has no role {role_name!r} (roles: {roles}).")
        now = timezone.now()
        explanations = [
            explanation
            for explanation in team_access_report(
                team=team, at=now, only_usable=not options["include_unavailable"]
            )
            if not role_name or explanation.role_name == role_name
        ]
        if options["format"] == "json":
            document = {
                "team": team.slug,
                "generated_at": now.isoformat(),
                "entries": [explanation.as_dict() for explanation in explanations],
            }
            self.stdout.write(json.dumps(document, indent=2, sort_keys=False))
            return
        writer = csv.DictWriter(self.stdout, fieldnames=ACCESS_REPORT_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(access_report_rows(explanations))
