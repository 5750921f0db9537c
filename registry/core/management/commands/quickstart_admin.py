"""`manage.py quickstart_admin`: the quickstart's admin account, created once, its sign-in printed.

`make run` calls this on every start. The first time it creates a superuser (``admin``) with a
generated password, which it keeps in TOOLROOM_DATA_DIR (mode 0600) so that later starts can print
it again. It never changes an existing user's password; if the user changed it, it says so.
Outside the quickstart it refuses: production admins are made with ``createsuperuser``.
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

CREDENTIAL_FILE_NAME = "quickstart_admin_password"


def password_file() -> Path:
    return Path(settings.DATA_DIR) / CREDENTIAL_FILE_NAME


def _read_password(path: Path) -> str | None:
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        return None
    path.chmod(0o600)  # a copied or restored file may have come back readable by others
    return value or None


def _store_new_password(path: Path) -> str:
    """Write a fresh password to `path`, readable by its owner only, unless one appeared first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(18)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        existing = _read_password(path)
        if existing:
            return existing
        raise
    with os.fdopen(fd, "w") as handle:
        handle.write(password + "\n")
    path.chmod(0o600)
    return password


def _shown_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class Command(BaseCommand):
    help = (
        "Create the quickstart's admin user (once, with a generated password kept in "
        "TOOLROOM_DATA_DIR) and print where to sign in and with what."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--username", default="admin", help="Default: admin.")
        parser.add_argument(
            "--url",
            default=None,
            help="The admin's address to print. Default: http://127.0.0.1:$PORT/admin/ "
            "(PORT defaults to 8000).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PROFILE == "production":
            raise CommandError(
                "quickstart_admin belongs to the quickstart: it keeps a generated password on "
                "disk. In production create admins with `python manage.py createsuperuser`."
            )
        username: str = options["username"]
        url: str = options["url"] or f"http://127.0.0.1:{os.environ.get('PORT') or 8000}/admin/"
        path = password_file()
        user_model = get_user_model()

        with transaction.atomic():
            user = user_model.objects.filter(username=username).first()
            if user is None:
                password = _read_password(path) or _store_new_password(path)
                user_model.objects.create_superuser(username=username, email="", password=password)
                remark = f"generated now, kept in {_shown_path(path)}"
                shown: str | None = password
            else:
                stored = _read_password(path)
                if stored is None:
                    shown = None
                    remark = (
                        f"the user already existed and no generated password is kept in "
                        f"{_shown_path(path)}; set one with: python manage.py changepassword "
                        f"{username}"
                    )
                elif user.check_password(stored):
                    shown = stored
                    remark = (
                        f"the one generated when this user was first created, kept in "
                        f"{_shown_path(path)}"
                    )
                else:
                    shown = None
                    remark = (
                        "changed since it was generated; use yours, or set a new one with: "
                        f"python manage.py changepassword {username}"
                    )

        self.stdout.write("Sign in to the Toolroom admin:")
        self.stdout.write(f"  URL:       {url}")
        self.stdout.write(f"  username:  {username}")
        if shown is not None:
            self.stdout.write(f"  password:  {shown}   ({remark})")
        else:
            self.stdout.write(f"  password:  {remark}")
        if not (user is None or (user.is_active and user.is_superuser)):
            self.stdout.write(
                self.style.WARNING(
                    f"  note: {username} is not an active superuser any more; the admin may not "
                    "let it in."
                )
            )
