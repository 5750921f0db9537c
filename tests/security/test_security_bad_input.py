"""Issue 11, items 6 to 9: bad input never costs availability. Deep YAML is refused as soon as
the scanner reaches the bound (every scalar style:
tests/security/test_security_yaml_nesting.py), deep JSON is a 400, non-numeric admin ids are
404s, every API error has the JSON error shape, unknown keys are refused, and access requests
are capped and throttled."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse

from registry.core.errors import ApplicationError
from registry.servers.importing import ImportFileError, ImportOptions, import_plan
from registry.servers.importing.reading import YAML_MAX_NESTING, YamlTooDeep, yaml_nesting_depth
from registry.teams import services
from registry.teams.models import AccessRequest, AgentToken, MembershipLevel
from tests.catalogue_helpers import READ, approved_server
from tests.factories import AgentTokenFactory, McpServerFactory, TeamFactory

pytestmark = pytest.mark.django_db

DEEP_FLOW_YAML = b"mcp_servers: " + b"[" * 20_000 + b"]" * 20_000
DEEP_BLOCK_YAML = b"mcp_servers:\n" + b"".join(b"  " * i + b"a:\n" for i in range(1, 200))


# --- 6. nesting is bounded before parsing -------------------------------------------------------


@pytest.mark.parametrize("content", [DEEP_FLOW_YAML, DEEP_BLOCK_YAML], ids=["flow", "block"])
def test_deeply_nested_yaml_is_refused_before_parsing(content):
    with pytest.raises(ImportFileError) as caught:
        import_plan(content=content, filename="s.yaml", options=ImportOptions(dry_run=True))
    assert f"deeper than {YAML_MAX_NESTING} levels" in caught.value.problems[0].message


def test_the_depth_bound_is_not_fooled_by_brackets_in_quotes():
    text = "x: " + '[ "]", ' * 100
    with pytest.raises(YamlTooDeep):
        yaml_nesting_depth(text)


def test_real_files_are_well_within_the_bound():
    from pathlib import Path

    demo = Path(__file__).parents[2] / "registry" / "servers" / "demo" / "servers.yaml"
    assert yaml_nesting_depth(demo.read_text()) == 6  # sandbox.storage: a list of maps


def test_the_admin_upload_refuses_deeply_nested_yaml(client, alice):
    client.force_login(alice)
    response = client.post(
        reverse("admin:servers_mcpserver_import"),
        {
            "file": SimpleUploadedFile("s.yaml", DEEP_FLOW_YAML),
            "format": "auto",
            "tier": "",
            "category": "",
        },
    )
    assert response.status_code == 400
    assert b"levels" in response.content


def test_the_import_command_refuses_deeply_nested_yaml(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(DEEP_FLOW_YAML)
    stderr = io.StringIO()
    with pytest.raises(CommandError):
        call_command("import_servers", str(path), stderr=stderr)
    assert "levels" in stderr.getvalue()


# --- 7. deep JSON, non-numeric admin ids, the API's error shape ---------------------------------


def _error_shape(response: Any) -> dict[str, Any]:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    body = response.json()
    assert set(body) == {"error"}
    assert {"code", "message", "fields"} <= set(body["error"])
    error: dict[str, Any] = body["error"]
    return error


def test_a_deeply_nested_json_body_is_a_400(api_client, charlie):
    api_client.force_login(charlie)
    response = api_client.post(
        "/api/v1/access-requests",
        data=b'{"team": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "nested too deeply" in _error_shape(response)["message"]


def test_an_unknown_api_url_is_a_json_404(client):
    response = client.get("/api/v1/no-such-thing")
    assert response.status_code == 404
    assert _error_shape(response)["code"] == "not_found"


def test_a_request_django_refuses_itself_is_a_json_400(client):
    response = client.get("/api/v1/teams", HTTP_HOST="attacker.example")  # not ALLOWED_HOSTS
    assert response.status_code == 400
    assert _error_shape(response)["code"] == "bad_request"


def test_an_unknown_admin_url_stays_an_html_page(client, alice):
    client.force_login(alice)
    response = client.get("/admin/no-such-app/")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")


@override_settings(DEBUG_PROPAGATE_EXCEPTIONS=False)
def test_a_crash_in_the_api_is_a_json_500(client, charlie, monkeypatch):
    from registry.api.views import teams

    def crash(*args, **kwargs):
        raise RuntimeError("a bug")  # stands in for any bug: the handler is what is tested

    monkeypatch.setattr(teams.TeamViewSet, "list", crash)
    client.force_login(charlie)
    client.raise_request_exception = False
    response = client.get("/api/v1/teams")
    assert response.status_code == 500
    assert _error_shape(response)["code"] == "server_error"


def test_nested_validation_errors_have_dotted_names_not_python_reprs(api_client, charlie):
    team = TeamFactory(slug="alpha")
    services.team_member_set(actor="test", team=team, user=charlie, level=MembershipLevel.OWNER)
    api_client.force_login(charlie)
    response = api_client.post(
        "/api/v1/agents",
        {"team": "alpha", "role": "review", "name": "bot", "declared_servers": {"required": [1.5]}},
        format="json",
    )
    error = _error_shape(response)
    assert response.status_code == 400
    assert "declared_servers.required.0" in error["fields"], error
    assert "ErrorDetail" not in response.content.decode()


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("server decision", "/admin/servers/mcpserver/abc/decide/approve/"),
        ("server operation", "/admin/servers/mcpserver/abc/operate/discover/"),
        ("discovery status", "/admin/servers/mcpserver/abc/discovery/1/status/"),
        ("tool approval", "/admin/servers/tool/abc/approve/"),
        ("tool revocation", "/admin/servers/tool/abc/revoke/"),
        ("access request decision", "/admin/teams/accessrequest/abc/decide/approve/"),
    ],
)
def test_a_non_numeric_id_in_the_admins_own_urls_is_a_404(client, alice, name, url):
    client.force_login(alice)
    assert client.post(url).status_code == 404, name


# --- 8. unknown keys ----------------------------------------------------------------------------


def test_a_misspelt_dependency_level_is_a_400_and_erases_nothing(api_client, charlie):
    team = TeamFactory(slug="alpha")
    services.team_member_set(actor="test", team=team, user=charlie, level=MembershipLevel.OWNER)
    McpServerFactory(slug="files")
    token = AgentTokenFactory(team=team, declared_servers={"required": ["files"]})
    api_client.force_login(charlie)

    response = api_client.post(
        f"/api/v1/agents/{token.pk}/declare-servers",
        {"declared_servers": {"Required": ["files"]}},
        format="json",
    )

    assert response.status_code == 400
    assert "declared_servers.Required" in _error_shape(response)["fields"]
    token.refresh_from_db()
    assert token.declared_servers == {"required": ["files"]}


def test_an_unknown_top_level_key_is_a_400(api_client, charlie):
    team = TeamFactory(slug="alpha")
    services.team_member_set(actor="test", team=team, user=charlie, level=MembershipLevel.OWNER)
    token = AgentTokenFactory(team=team, declared_servers={"required": ["files"]})
    api_client.force_login(charlie)

    response = api_client.post(
        f"/api/v1/agents/{token.pk}/declare-servers",
        {"declared_servers": {}, "required": ["x"]},
        format="json",
    )

    assert response.status_code == 400
    assert AgentToken.objects.get(pk=token.pk).declared_servers == {"required": ["files"]}


def test_the_service_refuses_an_unknown_level_from_any_entry_point():
    token = AgentTokenFactory()
    with pytest.raises(ApplicationError, match="not a dependency level"):
        services.agent_token_declare_servers(
            actor="cli", token=token, declared_servers={"Required": ["files"]}
        )


# --- 9. access requests: caps and a throttle ----------------------------------------------------


@pytest.fixture
def member_and_servers(charlie):
    team = TeamFactory(slug="alpha")
    services.team_member_set(actor="test", team=team, user=charlie)
    servers = [approved_server(f"s{i}", {f"t{i}": READ}) for i in range(3)]
    return team, servers


def test_a_team_may_keep_only_so_many_open_requests(settings, charlie, member_and_servers):
    team, servers = member_and_servers
    settings.TOOLROOM_ACCESS_REQUESTS_OPEN_PER_TEAM = 2
    for server in servers[:2]:
        services.access_request_create(actor=charlie, team=team, server=server, justification="j")

    with pytest.raises(ApplicationError, match="2 open access requests"):
        services.access_request_create(
            actor=charlie, team=team, server=servers[2], justification="j"
        )


def test_a_server_may_have_only_so_many_open_requests(settings, charlie, member_and_servers):
    team, servers = member_and_servers
    settings.TOOLROOM_ACCESS_REQUESTS_OPEN_PER_SERVER = 1
    other = TeamFactory(slug="beta")
    services.team_member_set(actor="test", team=other, user=charlie)
    services.access_request_create(actor=charlie, team=team, server=servers[0], justification="j")

    with pytest.raises(ApplicationError, match="open access requests"):
        services.access_request_create(
            actor=charlie, team=other, server=servers[0], justification="j"
        )


def test_a_create_and_withdraw_loop_stops_at_the_daily_limit(settings, charlie, member_and_servers):
    team, servers = member_and_servers
    settings.TOOLROOM_ACCESS_REQUESTS_PER_TEAM_PER_DAY = 3
    for _ in range(3):
        request = services.access_request_create(
            actor=charlie, team=team, server=servers[0], justification="j"
        )
        services.access_request_withdraw(actor=charlie, request=request)

    with pytest.raises(ApplicationError, match="in the last 24 hours"):
        services.access_request_create(
            actor=charlie, team=team, server=servers[0], justification="j"
        )
    assert AccessRequest.objects.count() == 3


@pytest.mark.usefixtures("redis_cache")
def test_the_api_throttles_access_request_changes(
    monkeypatch, api_client, charlie, member_and_servers
):
    from rest_framework.throttling import ScopedRateThrottle

    # DRF reads the rates once, at import: the test lowers the class's copy.
    rates = {**ScopedRateThrottle.THROTTLE_RATES, "access_requests": "2/hour"}
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", rates)
    api_client.force_login(charlie)
    answers = [
        api_client.post(
            "/api/v1/access-requests",
            {"team": "alpha", "server": f"s{i}", "justification": "j"},
            format="json",
        )
        for i in range(3)
    ]

    assert [a.status_code for a in answers] == [201, 201, 429]
    assert _error_shape(answers[2])["code"] == "throttled"


# --- 13. the answer carrying a new token is never cached ----------------------------------------


def test_the_201_with_a_new_token_is_not_stored_by_any_cache(api_client, charlie):
    team = TeamFactory(slug="alpha")
    services.team_member_set(actor="test", team=team, user=charlie, level=MembershipLevel.OWNER)
    api_client.force_login(charlie)

    response = api_client.post(
        "/api/v1/agents", {"team": "alpha", "role": "review", "name": "bot"}, format="json"
    )

    assert response.status_code == 201
    assert response.json()["token"].startswith("trm_")
    assert response["Cache-Control"] == "no-store"
