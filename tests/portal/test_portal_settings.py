"""The portal's settings: single sign-on is off until a client id is set, then needs the provider's
endpoints; e-mail is SMTP in production and the console elsewhere."""

from __future__ import annotations

import json

import pytest

from tests.core.test_settings import _manage, _production_env, _run

pytestmark = pytest.mark.processes

PROBE = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({'backends': s.AUTHENTICATION_BACKENDS, 'email': s.EMAIL_BACKEND, "
    "'claim': s.TOOLROOM_OIDC_TEAMS_CLAIM}))"
)
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "https://idp.example.com/auth",
    "OIDC_OP_TOKEN_ENDPOINT": "https://idp.example.com/token",
    "OIDC_OP_USER_ENDPOINT": "https://idp.example.com/me",
    "OIDC_OP_JWKS_ENDPOINT": "https://idp.example.com/jwks",
}
SSO_BACKEND = "registry.portal.oidc.PortalOidcBackend"


def _load(env, home):
    result = _run(["-c", PROBE], {"DJANGO_SETTINGS_MODULE": "registry.settings", **env}, home)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_single_sign_on_is_off_without_a_client_id_and_mail_goes_through_smtp(tmp_path):
    loaded = _load(_production_env(tmp_path), tmp_path)
    assert SSO_BACKEND not in loaded["backends"]
    assert loaded["email"] == "django.core.mail.backends.smtp.EmailBackend"


def test_a_client_id_turns_single_sign_on_on(tmp_path):
    env = {
        **_production_env(tmp_path),
        **ENDPOINTS,
        "OIDC_RP_CLIENT_ID": "toolroom",
        "OIDC_RP_CLIENT_SECRET_FILE": str(tmp_path / "secret"),
        "TOOLROOM_OIDC_TEAMS_CLAIM": "groups",
        "TOOLROOM_OIDC_TEAM_PREFIX": "toolroom-",
    }
    (tmp_path / "secret").write_text("s3cret\n")
    loaded = _load(env, tmp_path)
    assert loaded["backends"][1] == SSO_BACKEND
    assert loaded["claim"] == "groups"


def test_a_client_id_without_the_providers_endpoints_is_refused_by_name(tmp_path):
    env = {**_production_env(tmp_path), "OIDC_RP_CLIENT_ID": "toolroom"}
    result = _manage(env, tmp_path, "check")
    assert result.returncode != 0
    assert "OIDC_OP_AUTHORIZATION_ENDPOINT" in result.stderr


def test_a_teams_claim_without_a_prefix_is_refused(tmp_path):
    """Issue 26, Low 8: without a prefix any provider group named like a team would grant it."""
    env = {
        **_production_env(tmp_path),
        **ENDPOINTS,
        "OIDC_RP_CLIENT_ID": "toolroom",
        "OIDC_RP_CLIENT_SECRET_FILE": str(tmp_path / "secret"),
        "TOOLROOM_OIDC_TEAMS_CLAIM": "groups",
    }
    (tmp_path / "secret").write_text("s3cret\n")
    result = _manage(env, tmp_path, "check")
    assert result.returncode != 0
    assert (
        "TOOLROOM_OIDC_TEAMS_CLAIM is set but TOOLROOM_OIDC_TEAM_PREFIX is empty" in result.stderr
    )


def test_the_quickstart_prints_e_mail_to_the_console(tmp_path):
    loaded = _load({"TOOLROOM_PROFILE": "quickstart", "TOOLROOM_DATA_DIR": str(tmp_path)}, tmp_path)
    assert loaded["email"] == "django.core.mail.backends.console.EmailBackend"
