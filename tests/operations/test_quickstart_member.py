"""`manage.py quickstart_member`: the demo team member (not staff); its sign-in printed."""

from __future__ import annotations

import io
import stat

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

from registry.teams.models import Membership, MembershipLevel
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return tmp_path


def _run(*args):
    out = io.StringIO()
    call_command("quickstart_member", *args, stdout=out)
    return out.getvalue()


def test_it_creates_a_demo_member_who_can_sign_in_to_the_portal(data_dir):
    TeamFactory(slug="demo")

    output = _run("--url", "http://127.0.0.1:8123/portal/")

    password = (data_dir / "quickstart_member_password").read_text().strip()
    assert stat.S_IMODE((data_dir / "quickstart_member_password").stat().st_mode) == 0o600
    assert "URL:       http://127.0.0.1:8123/portal/" in output
    assert "username:  demo-member" in output
    assert f"password:  {password}" in output
    user = authenticate(username="demo-member", password=password)
    assert user is not None
    assert not user.is_staff
    assert Membership.objects.get(user=user).level == MembershipLevel.OWNER


def test_running_it_again_prints_the_same_sign_in_and_changes_nothing(data_dir):
    TeamFactory(slug="demo")
    first = _run()
    second = _run()
    assert first == second
    assert get_user_model().objects.filter(username="demo-member").count() == 1


def test_a_changed_password_is_not_printed_or_reset(data_dir):
    TeamFactory(slug="demo")
    _run()
    user = get_user_model().objects.get(username="demo-member")
    user.set_password("my own secret 123")
    user.save()
    output = _run()
    assert "changed since it was generated" in output
    assert authenticate(username="demo-member", password="my own secret 123") is not None


def test_it_refuses_in_production_and_without_the_demo_team(data_dir, settings):
    with pytest.raises(CommandError, match="load_demo_teams"):
        _run()
    settings.PROFILE = "production"
    with pytest.raises(CommandError, match="quickstart"):
        _run()
