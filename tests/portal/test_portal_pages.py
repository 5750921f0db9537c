"""The team portal's pages, through Django's test client: sign-in without being staff, what a team
may use, browsing, asking for access, owners' agent tokens, Connect, and the wall between teams."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from registry.audit.models import AuditEvent
from registry.servers import services as server_services
from registry.teams import services
from registry.teams.models import (
    AccessRequest,
    AccessRequestState,
    AgentToken,
    Membership,
    MembershipLevel,
)
from tests.catalogue_helpers import READ, WRITE, approved_server, tool_of
from tests.factories import GrantFactory, TeamFactory, ToolFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]

PASSWORD = "correct horse battery staple"


@pytest.fixture
def world(charlie, dave, committed):
    """charlie owns alpha, dave is a plain member of alpha; erin is in beta only.
    alpha has the whole `files` server until in three days; beta has `secret-sauce`."""
    erin = UserFactory(username="erin")
    with committed():
        alpha = TeamFactory(slug="alpha", name="Alpha")
        beta = TeamFactory(slug="beta", name="Beta")
        services.team_member_set(
            actor="test", team=alpha, user=charlie, level=MembershipLevel.OWNER
        )
        services.team_member_set(actor="test", team=alpha, user=dave)
        services.team_member_set(actor="test", team=beta, user=erin)
        files = approved_server(
            "files", {"read_file": READ, "write_file": WRITE}, category="storage"
        )
        secret = approved_server("secret-sauce", {"recipe": READ})
        clock = approved_server("clock", {"get_time": READ})
        GrantFactory(team=alpha, server=files, expires_at=timezone.now() + timedelta(days=3))
        GrantFactory(team=beta, server=secret)
    return {
        "alpha": alpha,
        "beta": beta,
        "files": files,
        "secret": secret,
        "clock": clock,
        "erin": erin,
    }


def _signed_in(client, user):
    client.force_login(user)
    return client


def test_a_member_who_is_not_staff_signs_in_with_the_portal_form(client, world, dave):
    page = client.get("/portal/")
    assert page.status_code == 302
    assert page["Location"].startswith("/portal/sign-in/")

    answer = client.post("/portal/sign-in/", {"username": "dave", "password": PASSWORD})
    assert answer.status_code == 302
    assert answer["Location"] == "/portal/"
    home = client.get("/portal/")
    assert home.status_code == 200
    assert b"Alpha" in home.content


def test_a_wrong_password_is_refused_with_a_message(client, world):
    answer = client.post("/portal/sign-in/", {"username": "dave", "password": "nope"})
    assert answer.status_code == 200
    assert b"correct username and password" in answer.content
    assert client.get("/portal/").status_code == 302


def test_members_never_see_the_admin_and_staff_keep_it(client, world, dave, alice):
    _signed_in(client, dave)
    assert b"/admin/" not in client.get("/portal/").content
    admin = client.get("/admin/")
    assert admin.status_code == 302
    assert admin["Location"].startswith("/admin/login/")
    assert client.get("/")["Location"] == "/portal/"

    _signed_in(client, alice)
    assert client.get("/admin/").status_code == 200
    assert client.get("/")["Location"] == "/admin/"
    assert b'href="/admin/"' in client.get("/portal/").content


def test_my_teams_lists_the_catalogue_of_each_role_and_grants_ending_soon(client, world, dave):
    body = _signed_in(client, dave).get("/portal/").content.decode()
    # The catalogue selector decides: review sees the read tool only, implementation both.
    review = body.split("Role review")[1].split("Role ")[0]
    implementation = body.split("Role implementation")[1].split("Role ")[0]
    assert "files__read_file" in review
    assert "files__write_file" not in review
    assert "files__write_file" in implementation
    assert "secret-sauce" not in body  # beta's grant
    assert "Access ending soon" in body
    assert "Files" in body.split("Access ending soon")[1]


def test_another_teams_pages_are_refused(client, world, dave):
    _signed_in(client, dave)
    for path in (
        "/portal/teams/beta/",
        "/portal/teams/beta/requests/",
        "/portal/teams/beta/owners/",
        "/portal/teams/beta/connect/",
    ):
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert "None of your teams has this name" in answer.content.decode()
        assert "/admin/" not in answer.content.decode()  # the portal's page, not the admin's
    assert client.post("/portal/teams/beta/requests/", {"target": "x"}).status_code == 404
    assert client.post("/portal/teams/beta/owners/tokens/", {"name": "x"}).status_code == 404
    assert not AgentToken.objects.filter(name="x").exists()


def test_an_address_under_the_portal_that_does_not_exist_gets_the_portal_page(client, world, dave):
    anonymous = client.get("/portal/no-such-page/")
    _signed_in(client, dave)
    member = client.get("/portal/teams/alpha/no-such-page/")
    elsewhere = client.get("/no-such-page/")

    for answer in (anonymous, member):
        assert answer.status_code == 404
        body = answer.content.decode()
        assert "There is nothing at this address" in body
        assert "/admin/" not in body  # the portal's look and links, not the admin's
    assert elsewhere.status_code == 404
    assert "There is nothing at this address" not in elsewhere.content.decode()


def test_owner_pages_are_for_owners_only(client, world, dave, charlie):
    _signed_in(client, dave)
    refused = client.get("/portal/teams/alpha/owners/")
    assert refused.status_code == 403
    assert "owners may see and do this" in refused.content.decode()
    role = world["alpha"].roles.get(name="review")
    answer = client.post("/portal/teams/alpha/owners/tokens/", {"name": "bot", "role": role.pk})
    assert answer.status_code == 403
    assert not AgentToken.objects.filter(name="bot").exists()
    _signed_in(client, charlie)
    assert client.get("/portal/teams/alpha/owners/").status_code == 200


def test_browse_shows_the_offer_with_vetting_and_marks_what_the_team_has(client, world, dave):
    body = _signed_in(client, dave).get("/portal/browse/").content.decode()
    for name in ("Files", "Secret Sauce", "Clock"):
        assert name in body
    files = body.split('id="server-files"')[1].split("</article>")[0]
    clock = body.split('id="server-clock"')[1].split("</article>")[0]
    assert "Alpha has it" in files
    assert "has it" not in clock
    assert "Storage" in files  # category
    assert "Trust tier: Builtin" in files
    assert "Vetting: approved on" in files
    assert "scanner: not scanned yet" in files

    found = client.get("/portal/browse/", {"q": "get_time"}).content.decode()
    assert 'id="server-clock"' in found
    assert 'id="server-files"' not in found


def test_a_member_asks_for_a_server_and_sees_the_request(client, world, dave):
    clock = world["clock"]
    answer = _signed_in(client, dave).post(
        "/portal/teams/alpha/requests/",
        {"target": f"server:{clock.pk}", "justification": "timestamps", "wished_expiry": ""},
    )
    assert answer.status_code == 302
    request = AccessRequest.objects.get(team=world["alpha"], server=clock)
    assert request.requested_by == dave
    assert request.state == AccessRequestState.PENDING
    page = client.get("/portal/teams/alpha/requests/").content.decode()
    assert "timestamps" in page
    assert "Pending" in page


def test_duplicate_and_covered_requests_are_explained_not_accepted(client, world, dave):
    clock, files = world["clock"], world["files"]
    _signed_in(client, dave)
    data = {"target": f"server:{clock.pk}", "justification": "timestamps"}
    client.post("/portal/teams/alpha/requests/", data)
    again = client.post("/portal/teams/alpha/requests/", data)
    assert again.status_code == 200
    assert "already has an open request" in again.content.decode()
    covered = client.post(
        "/portal/teams/alpha/requests/", {"target": f"server:{files.pk}", "justification": "x"}
    )
    assert "already has this access" in covered.content.decode()
    assert AccessRequest.objects.filter(team=world["alpha"]).count() == 1


def test_the_form_offers_only_what_an_admin_could_grant(client, world, dave):
    clock = world["clock"]
    pending_tool = ToolFactory(server=clock, name="set_time")  # discovered, not approved
    page = _signed_in(client, dave).get("/portal/teams/alpha/requests/").content.decode()
    assert f'value="tool:{tool_of(clock, "get_time").pk}"' in page
    assert f'value="tool:{pending_tool.pk}"' not in page
    # A hand-made or stale form (the server was retired since) is refused, nothing is written.
    server_services.server_retire(actor="test", server=world["secret"], reason="gone")
    for target in (f"tool:{pending_tool.pk}", f"server:{world['secret'].pk}"):
        answer = client.post(
            "/portal/teams/alpha/requests/", {"target": target, "justification": "please"}
        )
        assert answer.status_code == 200
        assert "Choose one of the approved servers or tools" in answer.content.decode()
    assert not AccessRequest.objects.exists()


def test_the_portal_service_refuses_an_unapproved_tool_with_the_reason(world, dave):
    from registry.core.errors import ApplicationError
    from registry.portal.services import portal_access_request_create

    pending_tool = ToolFactory(server=world["clock"], name="set_time")
    with pytest.raises(ApplicationError, match="not approved yet"):
        portal_access_request_create(
            actor=dave,
            team=world["alpha"],
            server=world["clock"],
            tool=pending_tool,
            role=None,
            justification="x",
            wished_expires_at=None,
        )
    server_services.server_retire(actor="test", server=world["clock"], reason="gone")
    world["clock"].refresh_from_db()
    with pytest.raises(ApplicationError, match="not approved at the moment"):
        portal_access_request_create(
            actor=dave,
            team=world["alpha"],
            server=world["clock"],
            tool=None,
            role=None,
            justification="x",
            wished_expires_at=None,
        )
    assert not AccessRequest.objects.exists()


def test_the_admins_decision_and_reason_reach_the_member_who_may_withdraw(client, world, dave):
    clock = world["clock"]
    _signed_in(client, dave)
    for target in (f"server:{clock.pk}", f"tool:{tool_of(world['secret'], 'recipe').pk}"):
        client.post("/portal/teams/alpha/requests/", {"target": target, "justification": "x"})
    first, second = AccessRequest.objects.order_by("pk")
    services.access_request_deny(actor="alice", request=first, reason="use the files server")
    page = client.get("/portal/teams/alpha/requests/").content.decode()
    assert "Denied" in page
    assert "use the files server" in page

    answer = client.post(f"/portal/teams/alpha/requests/{second.pk}/withdraw/")
    assert answer.status_code == 302
    second.refresh_from_db()
    assert second.state == AccessRequestState.WITHDRAWN


def test_only_the_requester_or_an_owner_may_withdraw(client, world, dave, charlie):
    other = UserFactory(username="frank")
    services.team_member_set(actor="test", team=world["alpha"], user=other)
    request = services.access_request_create(
        actor=other, team=world["alpha"], server=world["clock"], justification="x"
    )
    answer = _signed_in(client, dave).post(f"/portal/teams/alpha/requests/{request.pk}/withdraw/")
    assert answer.status_code == 403
    _signed_in(client, charlie).post(f"/portal/teams/alpha/requests/{request.pk}/withdraw/")
    request.refresh_from_db()
    assert request.state == AccessRequestState.WITHDRAWN


def test_an_owner_creates_a_token_shown_once_that_works_then_revokes_it(
    client, world, charlie, api_client, committed
):
    role = world["alpha"].roles.get(name="review")
    _signed_in(client, charlie)
    created = client.post(
        "/portal/teams/alpha/owners/tokens/",
        {"name": "ci-bot", "role": role.pk, "required_servers": "files, clock"},
    )
    # Post, redirect, get: a reload of the page that shows the token never posts again.
    assert created.status_code == 302
    assert created["Location"] == "/portal/teams/alpha/owners/#created-title"
    assert "trm_" not in client.session.get("portal_just_created", {}).get("secret", "")
    shown = client.get("/portal/teams/alpha/owners/")
    assert shown["Cache-Control"] == "no-store"
    page = shown.content.decode()
    plain = re.search(r'<code id="new-token">(trm_[^<]+)</code>', page).group(1)
    assert "it is shown this once" in page
    assert 'data-copy="new-token"' in page
    token = AgentToken.objects.get(name="ci-bot")
    assert token.declared_servers == {"required": ["clock", "files"]}
    reloaded = client.get("/portal/teams/alpha/owners/")  # the reload
    assert reloaded.status_code == 200
    assert plain not in reloaded.content.decode()
    assert AgentToken.objects.filter(name="ci-bot").count() == 1

    catalogue = api_client.get("/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert catalogue.status_code == 200
    assert [t["name"] for t in catalogue.json()["tools"]] == ["files__read_file"]
    owners = client.get("/portal/teams/alpha/owners/").content.decode()
    row = owners.split("ci-bot")[1].split("</tr>")[0]
    assert "never" not in row  # last used: the moment the catalogue was fetched

    # The catalogue's pre-flight, as the agent would get it: clock is not granted to alpha.
    row = client.get("/portal/teams/alpha/owners/").content.decode().split("ci-bot", 1)[1]
    preflight = row.split('class="preflight"')[1].split("</ul>")[0]
    assert re.search(r"<code>clock</code> \(required\): <span[^>]*>not_granted", preflight)
    assert re.search(r"<code>files</code> \(required\): <span[^>]*>ok", preflight)
    client.post(
        f"/portal/teams/alpha/owners/tokens/{token.pk}/declare/", {"required_servers": "files"}
    )
    token.refresh_from_db()
    assert token.declared_servers == {"required": ["files"]}

    with committed():  # the token cache is evicted when the revocation commits
        answer = client.post(f"/portal/teams/alpha/owners/tokens/{token.pk}/revoke/")
    assert answer.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    again = api_client.get("/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert again.status_code == 401


def test_a_token_with_a_taken_name_is_explained(client, world, charlie):
    role = world["alpha"].roles.get(name="review")
    _signed_in(client, charlie)
    client.post("/portal/teams/alpha/owners/tokens/", {"name": "bot", "role": role.pk})
    again = client.post("/portal/teams/alpha/owners/tokens/", {"name": "bot", "role": role.pk})
    assert again.status_code == 400
    assert "already has an agent token with this name" in again.content.decode()
    assert "trm_" not in again.content.decode()


def test_owners_see_members_roles_and_when_tokens_were_last_used(client, world, charlie):
    body = _signed_in(client, charlie).get("/portal/teams/alpha/owners/").content.decode()
    assert "charlie" in body
    assert "dave" in body
    assert "Owner" in body
    assert "operations" in body


def test_connect_gives_client_configs_without_any_token(client, world, dave):
    body = _signed_in(client, dave).get("/portal/teams/alpha/connect/").content.decode()
    for title in (
        "Claude Code", "Claude Desktop", "VS Code", "Cursor", "MCP Inspector", "OpenAI", "Anthropic"
    ):  # fmt: skip
        assert title in body
    assert "toolroom-alpha" in body
    assert "format=openai" in body
    assert "format=anthropic" in body
    assert "http://127.0.0.1:8000/api/v1/catalogue/mcp.json?client=claude-code" in body
    assert "/api/v1/tools/{call.name}/call?format=openai" in body  # the whole loop
    assert "/api/v1/tools/{use.name}/call?format=anthropic" in body
    assert "http://127.0.0.1:8000/mcp/" in body  # the catalogue's client config: the gateway
    assert "trm_" not in body


def test_browse_and_my_teams_take_as_many_queries_whatever_the_registry_size(client, world, dave):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _signed_in(client, dave)

    def count(path):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(path).status_code == 200
        return len(queries)

    for path in ("/portal/browse/", "/portal/"):
        count(path)  # warm Django's content type cache
    before = {path: count(path) for path in ("/portal/browse/", "/portal/")}
    for n in range(5):
        server = approved_server(f"extra-{n}", {"one": READ, "two": WRITE}, category=f"c{n}")
        GrantFactory(team=world["alpha"], server=server)
    after = {path: count(path) for path in ("/portal/browse/", "/portal/")}
    assert after == before


def test_browse_summarises_the_scanners_verdict(client, world, dave):
    from registry.servers.models import ServerStatus, Tool

    report = {"ok": True, "findings": {"tools_flagged": [], "tools_flagged_count": 0}}
    ServerStatus.objects.filter(server__slug__in=["files", "clock"]).update(vetting_report=report)
    Tool.objects.filter(server__slug="files", name="write_file").update(
        findings=[{"kind": "instructions", "detail": "asks the model to ignore the user"}]
    )
    body = _signed_in(client, dave).get("/portal/browse/").content.decode()
    files = body.split('id="server-files"')[1].split("</article>")[0]
    clock = body.split('id="server-clock"')[1].split("</article>")[0]
    secret = body.split('id="server-secret-sauce"')[1].split("</article>")[0]
    assert "scanner: 1 tool(s) flagged by the scanner; approved after review" in files
    assert "scanner: no findings" in clock
    assert "scanner: not scanned yet" in secret


def test_the_portal_sign_in_goes_through_djangos_authenticate(client, world):
    """So whatever guards `authenticate()` (login-failure signals, lockouts) guards the portal."""
    from django.contrib.auth.signals import user_logged_in, user_login_failed

    failed, succeeded = [], []

    def on_failure(sender, credentials, request=None, **kwargs):
        failed.append((credentials["username"], request is not None))

    def on_success(sender, user, request=None, **kwargs):
        succeeded.append(user.username)

    user_login_failed.connect(on_failure)
    user_logged_in.connect(on_success)
    try:
        client.post("/portal/sign-in/", {"username": "dave", "password": "wrong"})
        client.post("/portal/sign-in/", {"username": "dave", "password": PASSWORD})
    finally:
        user_login_failed.disconnect(on_failure)
        user_logged_in.disconnect(on_success)
    assert failed == [("dave", True)]
    assert succeeded == ["dave"]


def test_the_connect_snippets_are_valid_json_and_python(world):
    import json

    from registry.catalogue.selectors import catalogue_for_agent
    from registry.portal.connect import connect_snippets

    role = world["alpha"].roles.get(name="review")
    catalogue = catalogue_for_agent(team_id=world["alpha"].pk, role_id=role.pk)
    snippets = {s.key: s for s in connect_snippets(catalogue=catalogue, public_url="https://t.io/")}
    assert set(snippets) == {
        "sign-in",
        "claude-code",
        "claude-desktop",
        "vscode",
        "cursor",
        "inspector",
        "openai",
        "anthropic",
    }
    for key in ("claude-desktop", "vscode", "cursor"):
        document = json.loads(snippets[key].text)
        assert "toolroom-alpha" in json.dumps(document)
    assert json.loads(snippets["vscode"].text)["servers"]["toolroom-alpha"]["url"] == (
        "https://t.io/mcp/"
    )
    for key in ("openai", "anthropic"):
        compile(snippets[key].text, key, "exec")
        assert 'BASE, TOKEN = "https://t.io"' in snippets[key].text
        assert '"/api/v1/catalogue?format=' + key in snippets[key].text
        assert f"/call?format={key}" in snippets[key].text
    entry = snippets["claude-code"].text.split("'")[1]
    assert json.loads(entry)["url"] == "https://t.io/mcp/"
    assert "claude mcp add --transport http toolroom https://t.io/mcp/" in snippets["sign-in"].text


def test_why_not_explains_a_tool_for_each_of_the_teams_roles(client, world, dave):
    """The same access_explain as the API: alpha's grant covers files, not secret-sauce; a tool
    of beta's unapproved server reads like a name that does not exist."""
    hidden = approved_server("beta-private", {"plan": READ})
    server_services.server_suspend(actor="test", server=hidden, reason="only for beta")
    GrantFactory(team=world["beta"], server=hidden)
    page = _signed_in(client, dave)

    granted = page.get("/portal/teams/alpha/explain/", {"tool": "files__read_file"})
    not_granted = page.get("/portal/teams/alpha/explain/", {"tool": "secret-sauce__recipe"})
    other_teams = page.get("/portal/teams/alpha/explain/", {"tool": "beta-private__plan"})
    unknown = page.get("/portal/teams/alpha/explain/", {"tool": "nope__nothing"})
    not_mine = page.get("/portal/teams/beta/explain/", {"tool": "secret-sauce__recipe"})

    assert granted.status_code == 200
    roles = [explanation.role_name for explanation in granted.context["explanations"]]
    assert roles == sorted(role.name for role in world["alpha"].roles.all())
    operations = next(e for e in granted.context["explanations"] if e.role_name == "operations")
    assert operations.callable
    assert "Role operations: callable" in granted.content.decode()
    refused = not_granted.context["explanations"][0]
    assert (refused.callable, refused.first_failure.rule) == (False, "grant")
    assert "fails" in not_granted.content.decode()
    # Rule names in words; the picker offers what the team may ask about, never beta's server.
    assert "<td>The team has been given access</td>" in not_granted.content.decode()
    assert "<code>grant</code>" not in not_granted.content.decode()
    options = re.findall(r'<option value="([^"]+)">', granted.content.decode())
    assert "files__read_file" in options
    assert "secret-sauce__recipe" in options  # approved: any team may ask about it
    assert "beta-private__plan" not in options
    assert 'list="tool-names"' in granted.content.decode()
    assert other_teams.context["explanations"] == unknown.context["explanations"] == []
    assert (
        other_teams.context["error"] == "No tool you may ask about is named 'beta-private__plan'."
    )
    assert "No tool you may ask about is named" in other_teams.content.decode()
    assert not_mine.status_code == 404


def test_an_owner_adds_promotes_demotes_and_removes_members_audited(client, world, charlie, dave):
    frank = UserFactory(username="frank", email="Frank@Example.com")
    _signed_in(client, charlie)

    added = client.post(
        "/portal/teams/alpha/owners/members/", {"who": "frank@example.com", "level": "member"}
    )
    assert added.status_code == 302
    membership = Membership.objects.get(team=world["alpha"], user=frank)
    assert membership.level == MembershipLevel.MEMBER
    page = client.get("/portal/teams/alpha/owners/").content.decode()
    assert "frank is member of Alpha." in page
    assert '<label for="level-' in page
    assert 'Remove<span class="visually-hidden"> frank</span>' in page

    client.post(f"/portal/teams/alpha/owners/members/{membership.pk}/level/", {"level": "owner"})
    membership.refresh_from_db()
    assert membership.level == MembershipLevel.OWNER
    client.post(f"/portal/teams/alpha/owners/members/{membership.pk}/remove/")
    assert not Membership.objects.filter(team=world["alpha"], user=frank).exists()

    actions = list(
        AuditEvent.objects.filter(action__in=["team.member_set", "team.member_removed"])
        .order_by("pk")
        .values_list("action", "actor_label")
    )
    assert actions[-3:] == [
        ("team.member_set", "charlie"),
        ("team.member_set", "charlie"),
        ("team.member_removed", "charlie"),
    ]


def test_the_last_owner_stays_and_unknown_people_are_explained(client, world, charlie, dave):
    _signed_in(client, charlie)
    own = Membership.objects.get(team=world["alpha"], user=charlie)

    client.post(f"/portal/teams/alpha/owners/members/{own.pk}/level/", {"level": "member"})
    client.post(f"/portal/teams/alpha/owners/members/{own.pk}/remove/")
    own.refresh_from_db()
    assert own.level == MembershipLevel.OWNER
    page = client.get("/portal/teams/alpha/owners/").content.decode()
    assert "charlie is the last owner of Alpha" in page

    unknown = client.post(
        "/portal/teams/alpha/owners/members/", {"who": "nobody", "level": "member"}
    )
    assert unknown.status_code == 400
    assert "No single Toolroom account is named or reached at &#x27;nobody&#x27;" in (
        unknown.content.decode()
    )


def test_members_may_not_manage_members_nor_another_teams(client, world, charlie, dave):
    dave_membership = Membership.objects.get(team=world["alpha"], user=dave)
    _signed_in(client, dave)
    answer = client.post(
        f"/portal/teams/alpha/owners/members/{dave_membership.pk}/level/", {"level": "owner"}
    )
    assert answer.status_code == 403
    dave_membership.refresh_from_db()
    assert dave_membership.level == MembershipLevel.MEMBER
    _signed_in(client, charlie)
    other = Membership.objects.get(team=world["beta"], user=world["erin"])
    answer = client.post(f"/portal/teams/alpha/owners/members/{other.pk}/remove/")
    assert answer.status_code == 404
    assert Membership.objects.filter(pk=other.pk).exists()
    assert client.post("/portal/teams/beta/owners/members/", {"who": "dave"}).status_code == 404


def test_the_requests_page_shows_the_end_that_was_granted(client, world, dave, committed):
    request = services.access_request_create(
        actor=dave,
        team=world["alpha"],
        server=world["clock"],
        justification="time",
        wished_expires_at=timezone.now() + timedelta(days=60),
    )
    granted = timezone.now() + timedelta(days=10)
    services.access_request_approve(actor="granter", request=request, expires_at=granted)

    page = _signed_in(client, dave).get("/portal/teams/alpha/requests/").content.decode()

    assert f"granted until {timezone.localtime(granted):%Y-%m-%d}" in page
    assert "wished until" not in page


def test_every_connect_snippet_has_a_copy_button(client, world, dave):
    page = _signed_in(client, dave).get("/portal/teams/alpha/connect/").content.decode()
    snippets = re.findall(r'<code id="(snippet-code-[^"]+)"', page)
    assert len(snippets) >= 5
    for snippet in snippets:
        assert f'data-copy="{snippet}"' in page
