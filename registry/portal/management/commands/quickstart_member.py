"""`manage.py quickstart_member`: the quickstart's demo team member, created once, sign-in printed.

`make run` calls this after `load_demo_teams`. The first time it creates ``demo-member``, a person
who is not staff, with a generated password kept in TOOLROOM_DATA_DIR (mode 0600), and makes them
an owner of the demo team (through the teams service, so guardian's permissions follow). Every run
prints the portal's address and the sign-in. It never changes an existing password, and it refuses
in production.
"""

from __future__ import annotations

import os
import secrets
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from registry.teams.models import Membership, MembershipLevel, Team
from registry.teams.services import team_member_set

PASSWORD_FILE = "quickstart_member_password"  # noqa: S105 (a file name)
DEMO_TEAM = "demo"


def _stored_password(path: Path) -> str | None:
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        return None
    path.chmod(0o600)
    return value or None


def _new_password(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(18)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(password + "\n")
    path.chmod(0o600)
    return password


class Command(BaseCommand):
    help = (
        "Create the quickstart's demo team member (not staff; owner of the demo team) with a "
        "generated password kept in TOOLROOM_DATA_DIR, and print how to sign in to the portal."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--username", default="demo-member", help="Default: demo-member.")
        parser.add_argument(
            "--url",
            default=None,
            help="The portal's address to print. Default: http://127.0.0.1:$PORT/portal/.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PROFILE == "production":
            raise CommandError(
                "quickstart_member belongs to the quickstart: it keeps a generated password on "
                "disk. In production people sign in with single sign-on or accounts you create."
            )
        team = Team.objects.filter(slug=DEMO_TEAM).first()
        if team is None:
            raise CommandError("There is no demo team yet: run `manage.py load_demo_teams` first.")
        username: str = options["username"]
        url: str = options["url"] or f"http://127.0.0.1:{os.environ.get('PORT') or 8000}/portal/"
        path = Path(settings.DATA_DIR) / PASSWORD_FILE
        user_model = get_user_model()
        with transaction.atomic():
            user = user_model._default_manager.filter(username=username).first()
            if user is None:
                password = _stored_password(path) or _new_password(path)
                user = user_model._default_manager.create_user(
                    username=username, email=f"{username}@localhost", password=password
                )
                shown: str | None = password
            else:
                stored = _stored_password(path)
                shown = stored if stored and user.check_password(stored) else None
            if not Membership.objects.filter(team=team, user=user).exists():
                team_member_set(
                    actor="quickstart", team=team, user=user, level=MembershipLevel.OWNER
                )
        self.stdout.write("Sign in to the team portal as a member (owner) of the demo team:")
        self.stdout.write(f"  URL:       {url}")
        self.stdout.write(f"  username:  {username}")
        if shown is not None:
            self.stdout.write(f"  password:  {shown}   (kept in {path})")
        else:
            self.stdout.write(
                f"  password:  changed since it was generated; set one with: "
                f"python manage.py changepassword {username}"
            )
