"""`manage.py quickstart_admin`: one admin, a generated password kept 0600, its sign-in printed."""

from __future__ import annotations

import stat
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from registry.core.management.commands.quickstart_admin import CREDENTIAL_FILE_NAME

URL = "http://127.0.0.1:8123/admin/"


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "var"
    return settings.DATA_DIR


def _run(*args: str) -> str:
    out = StringIO()
    call_command("quickstart_admin", *args, stdout=out)
    return out.getvalue()


def test_it_creates_a_superuser_and_prints_url_username_and_password(db, data_dir):
    output = _run("--url", URL)

    password = (data_dir / CREDENTIAL_FILE_NAME).read_text().strip()
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser
    assert admin.is_staff
    assert admin.check_password(password)
    assert URL in output
    assert "username:  admin" in output
    assert f"password:  {password}" in output
    assert "generated now" in output


def test_it_keeps_the_password_readable_by_its_owner_only(db, data_dir):
    _run("--url", URL)

    mode = stat.S_IMODE((data_dir / CREDENTIAL_FILE_NAME).stat().st_mode)
    assert mode == 0o600


def test_it_creates_the_user_once_and_prints_the_same_password_again(db, data_dir):
    _run("--url", URL)
    password = (data_dir / CREDENTIAL_FILE_NAME).read_text().strip()

    again = _run("--url", URL)

    assert get_user_model().objects.filter(username="admin").count() == 1
    assert f"password:  {password}" in again
    assert "first created" in again


def test_it_never_shows_or_resets_a_password_the_admin_changed(db, data_dir):
    _run("--url", URL)
    admin = get_user_model().objects.get(username="admin")
    admin.set_password("chosen-by-the-admin")
    admin.save()
    generated = (data_dir / CREDENTIAL_FILE_NAME).read_text().strip()

    output = _run("--url", URL)

    admin.refresh_from_db()
    assert admin.check_password("chosen-by-the-admin")
    assert generated not in output
    assert "changed since it was generated" in output
    assert "changepassword admin" in output


def test_an_existing_user_without_a_stored_password_is_left_alone(db, data_dir):
    get_user_model().objects.create_superuser(username="admin", email="", password="own-one")

    output = _run("--url", URL)

    assert not (data_dir / CREDENTIAL_FILE_NAME).exists()
    assert "changepassword admin" in output
    assert get_user_model().objects.get(username="admin").check_password("own-one")


def test_the_default_url_follows_port(db, data_dir, monkeypatch):
    monkeypatch.setenv("PORT", "9017")

    output = _run()

    assert "http://127.0.0.1:9017/admin/" in output


def test_it_refuses_to_run_in_production(db, data_dir, settings):
    settings.PROFILE = "production"

    with pytest.raises(CommandError, match="createsuperuser"):
        _run("--url", URL)
    assert not get_user_model().objects.filter(username="admin").exists()
