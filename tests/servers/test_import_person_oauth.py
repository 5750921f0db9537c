"""Imports recognise a server that signs each person in with OAuth (issue 25): an mcp.json,
server.json or Toolroom YAML entry (the CLI or the admin's import form), or the admin's server
form, whose server answers 401
naming its resource metadata, or an mcp.json entry with an `oauth` object, imports as a
per-person server, and the plan says why; the `oauth` object's `clientId` (and `clientSecret`,
`scopes`) becomes the server's upstream OAuth client, the admin's, and linking uses it. Against
the SDK server that is its own authorization server (tests/mcp_servers/oauth_upstream.py)."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from registry.audit.models import AuditEvent
from registry.servers.importing import ImportOptions, export_servers, import_apply, import_plan
from registry.servers.importing.planning import ImportAction
from registry.servers.importing.reading import FORMAT_MCP_JSON
from registry.servers.importing.report import plan_lines
from registry.servers.models import McpServer, Transport, UpstreamAuth
from registry.upstream.models import Registration, UpstreamClient
from registry.upstream.services import link_start
from tests.factories import McpServerFactory, UserFactory
from tests.mcp_servers.oauth_upstream import RunningUpstream
from tests.servers.test_admin_servers import _form_data

pytestmark = pytest.mark.django_db

FOUND = "signs each person in with their own account"


@pytest.fixture(scope="module")
def upstream():
    running = RunningUpstream()
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def probing(settings):
    settings.TOOLROOM_IMPORT_PROBE_OAUTH = True


def _plan(content: str, filename: str):
    return import_plan(content=content.encode(), filename=filename, options=ImportOptions())


def _mcp_json(url: str, **extra: object) -> str:
    return json.dumps({"mcpServers": {"tracker": {"type": "http", "url": url, **extra}}})


def test_an_mcp_json_entry_for_an_oauth_server_imports_as_a_per_person_server(upstream):
    plan = _plan(_mcp_json(upstream.url), "mcp.json")
    [entry] = plan.entries
    assert entry.values["upstream_auth"] == UpstreamAuth.PERSON_OAUTH
    assert any(FOUND in warning and upstream.base in warning for warning in entry.warnings)
    assert "upstream_auth" in entry.changed_fields
    import_apply(plan=plan, actor="cli:test")
    assert McpServer.objects.get(slug="tracker").upstream_auth == UpstreamAuth.PERSON_OAUTH


def test_a_server_json_remote_for_an_oauth_server_imports_as_a_per_person_server(upstream):
    document = {
        "$schema": "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
        "name": "com.example/tracker",
        "description": "Issues",
        "version": "1.0.0",
        "remotes": [{"type": "streamable-http", "url": upstream.url}],
    }
    plan = _plan(json.dumps(document), "server.json")
    [entry] = plan.entries
    assert entry.values["upstream_auth"] == UpstreamAuth.PERSON_OAUTH
    assert any(FOUND in warning for warning in entry.warnings)


def test_a_yaml_entry_for_an_oauth_server_imports_as_a_per_person_server(upstream):
    document = (
        "version: 1\nmcp_servers:\n  tracker:\n    name: Tracker\n"
        f"    transport: streamable_http\n    url: {upstream.url}\n"
    )
    [entry] = _plan(document, "servers.yaml").entries
    assert entry.values["upstream_auth"] == UpstreamAuth.PERSON_OAUTH


def test_an_entry_with_a_shared_authorization_header_stays_shared_with_a_warning(upstream):
    plan = _plan(_mcp_json(upstream.url, headers={"Authorization": "Bearer x"}), "mcp.json")
    [entry] = plan.entries
    assert entry.values.get("upstream_auth", UpstreamAuth.SHARED) == UpstreamAuth.SHARED
    assert any("stays shared" in warning for warning in entry.warnings)


def test_an_oauth_object_in_mcp_json_imports_as_a_per_person_server(settings):
    settings.TOOLROOM_IMPORT_PROBE_OAUTH = False  # the file alone says it
    content = _mcp_json("https://mcp.example.com/mcp", oauth={"clientId": "desktop-client"})
    [entry] = _plan(content, "mcp.json").entries
    assert entry.values["upstream_auth"] == UpstreamAuth.PERSON_OAUTH
    text = " ".join(entry.warnings)
    assert "not supported" not in text
    assert "imported as a per-person server" in text
    assert "http://127.0.0.1:8000/portal/accounts/callback/ as a redirect URI" in text


def test_the_admins_import_form_shows_it_in_the_plan(client, upstream):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    upload = SimpleUploadedFile("mcp.json", _mcp_json(upstream.url).encode())
    page = client.post(
        reverse("admin:servers_mcpserver_import"),
        {"file": upload, "format": "auto", "tier": "", "category": ""},
    ).content.decode()
    assert "imported as a per-person server" in page
    assert "Each person&#x27;s own OAuth account" in page or "person_oauth" in page


def test_the_admins_server_form_saves_an_oauth_server_as_a_per_person_server(client, upstream):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    data = _form_data(
        name="Tracker",
        slug="tracker",
        transport=Transport.STREAMABLE_HTTP,
        command="",
        url=upstream.url,
        trust_tier="builtin",
        isolation="local",
        upstream_auth=UpstreamAuth.SHARED,
    )
    page = client.post(reverse("admin:servers_mcpserver_add"), data, follow=True)
    assert page.status_code == 200
    assert McpServer.objects.get(slug="tracker").upstream_auth == UpstreamAuth.PERSON_OAUTH
    assert "saved as a per-person server" in page.content.decode()


def test_an_mcp_json_export_of_a_per_person_server_imports_back_as_one(settings):
    settings.TOOLROOM_IMPORT_PROBE_OAUTH = False
    McpServerFactory(
        slug="tracker",
        transport=Transport.STREAMABLE_HTTP,
        url="https://mcp.example.com/mcp",
        command=[],
        upstream_auth=UpstreamAuth.PERSON_OAUTH,
    )
    exported = export_servers(format=FORMAT_MCP_JSON)
    assert json.loads(exported)["mcpServers"]["tracker"]["oauth"] == {}
    McpServer.objects.all().delete()
    import_apply(plan=_plan(exported, "mcp.json"), actor="cli:test")
    assert McpServer.objects.get(slug="tracker").upstream_auth == UpstreamAuth.PERSON_OAUTH


def _client_line(entry) -> tuple[str, str]:
    [change] = [change for change in entry.changes if change.field == "upstream OAuth client"]
    return change.old, change.new


def test_an_oauth_objects_client_id_becomes_the_admins_upstream_client(settings, upstream):
    """The plan shows the client the file names; applying stores it as the admin's (audited);
    the same file again changes nothing; another client id and a secret replace it (the secret
    masked in the plan, encrypted at rest); and linking uses that client, registering none."""
    settings.TOOLROOM_IMPORT_PROBE_OAUTH = False
    oauth = {"clientId": "toolroom-at-tracker", "callbackPort": 8080, "scopes": "read"}
    plan = _plan(_mcp_json(upstream.url, oauth=oauth), "mcp.json")
    [entry] = plan.entries
    assert _client_line(entry) == (
        "(none: Toolroom registers its own)",
        "client id 'toolroom-at-tracker' (the admin's), scopes 'read'",
    )
    assert "upstream OAuth client" not in entry.changed_fields
    assert any("upstream OAuth client:" in line for line in plan_lines(plan))
    import_apply(plan=plan, actor="cli:test")
    server = McpServer.objects.get(slug="tracker")
    client = UpstreamClient.objects.get(server=server)
    assert (client.registration, client.client_id, client.scopes, client.client_secret) == (
        Registration.ADMIN,
        "toolroom-at-tracker",
        "read",
        {},
    )
    event = AuditEvent.objects.get(action="upstream.client_imported")
    assert event.actor_label == "cli:test"

    again = _plan(_mcp_json(upstream.url, oauth=oauth), "mcp.json")
    assert [e.action for e in again.entries] == [ImportAction.UNCHANGED]

    oauth = {"clientId": "toolroom-confidential", "clientSecret": "s3cret-value"}
    plan = _plan(_mcp_json(upstream.url, oauth=oauth), "mcp.json")
    [entry] = plan.entries
    assert entry.action == ImportAction.UPDATE
    old, new = _client_line(entry)
    assert old == "client id 'toolroom-at-tracker' (the admin's), scopes 'read'"
    assert new.startswith("client id 'toolroom-confidential' (the admin's), secret ")
    assert "s3cret-value" not in "\n".join(plan_lines(plan))
    import_apply(plan=plan, actor="cli:test")
    client.refresh_from_db()
    assert (client.client_id, client.client_secret, client.scopes) == (
        "toolroom-confidential",
        {"client_secret": "s3cret-value"},
        "read",
    )
    assert server.updated_at == McpServer.objects.get(pk=server.pk).updated_at  # server kept

    # Linking discovers the endpoints and sends the person with the imported client's id.
    url = link_start(person=UserFactory(), server=server, session={})
    assert url.startswith(upstream.base)
    assert "client_id=toolroom-confidential" in url
    client.refresh_from_db()
    assert client.registration_endpoint == ""  # Toolroom registered no client of its own
    assert client.registration == Registration.ADMIN
