"""Change notices (issue 28): a rug pull, a server suspended or retired and access about to end
reach the people concerned. E-mail goes to a real SMTP server (aiosmtpd) and webhooks to a real
HTTP receiver, through the outbox (the fixtures of tests/test_notifications.py); the portal shows
the team what it lost and why."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from registry.core import task_queue
from registry.notifications import changes
from registry.notifications.models import DeliveryState, EmailNotification, WebhookDelivery
from registry.notifications.services import webhook_endpoint_create
from registry.servers import services as server_services
from registry.servers.vetting import tool_sync
from registry.teams import services as team_services
from registry.teams.models import Grant, MembershipLevel
from tests.catalogue_helpers import READ, WRITE, approved_server, tool_of
from tests.factories import TeamFactory, UserFactory, tool_definition
from tests.notifications.test_notifications import (  # noqa: F401 (fixtures: an inbox, a receiver, the tasks)
    receiver,
    run_tasks,
    sent_tasks,
    smtp_inbox,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_cache")]

TOOLS = {"read_file": READ, "write_file": WRITE, "list_dir": READ}


@pytest.fixture
def world(db):
    """A server three teams hold differently, owners and members, admins who may (not) approve
    tools or change servers."""
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    vetter = UserFactory(username="vetter", is_staff=True)
    vetter.user_permissions.add(
        Permission.objects.get(content_type__app_label="servers", codename="approve_tool"),
    )
    operator = UserFactory(username="operator", is_staff=True)
    operator.user_permissions.add(
        Permission.objects.get(content_type__app_label="servers", codename="change_mcpserver"),
    )
    UserFactory(username="viewer", is_staff=True)  # staff, decides nothing
    server = approved_server("files", TOOLS)
    teams = {}
    for slug in ("alpha", "beta", "gamma"):
        team = TeamFactory(slug=slug, name=slug.title())
        owner = UserFactory(username=f"{slug}-owner")
        member = UserFactory(username=f"{slug}-member")
        team_services.team_member_set(
            actor="test", team=team, user=owner, level=MembershipLevel.OWNER
        )
        team_services.team_member_set(
            actor="test", team=team, user=member, level=MembershipLevel.MEMBER
        )
        teams[slug] = team
    # alpha: the whole server; beta: list_dir only (unchanged); gamma: read_file only.
    team_services.grant_create(actor="test", team=teams["alpha"], server=server)
    team_services.grant_create(
        actor="test", team=teams["beta"], server=server, tool=tool_of(server, "list_dir")
    )
    team_services.grant_create(
        actor="test", team=teams["gamma"], server=server, tool=tool_of(server, "read_file")
    )
    return {"server": server, "teams": teams, "root": root}


def _rug_pull(server, *names):
    definitions = [
        tool_definition(
            name, annotations=hints, **({"description": "Now worse."} if name in names else {})
        )
        for name, hints in TOOLS.items()
    ]
    return tool_sync.server_tools_sync(server=server, tools=definitions)


def _endpoint(url, team=None):
    return webhook_endpoint_create(actor="test", url=url, team=team).endpoint


def _mail(inbox):
    """(recipient, subject, body) of every message received, by recipient."""
    return sorted(
        (m["X-Envelope-To"], m["Subject"].replace("\r\n", ""), m.get_payload())
        for m in inbox.messages
    )


@pytest.fixture
def local_webhooks(settings):
    settings.TOOLROOM_ALLOWED_NETWORKS = ["127.0.0.0/8"]


@pytest.mark.usefixtures("local_webhooks")
def test_a_rug_pull_tells_the_tool_deciders_and_the_owners_of_the_teams_that_held_it(
    world,
    smtp_inbox,  # noqa: F811
    receiver,  # noqa: F811
    sent_tasks,  # noqa: F811
):
    server, teams = world["server"], world["teams"]
    approved = tool_of(server, "read_file").definition_hash
    _endpoint(receiver.url + "/global")
    _endpoint(receiver.url + "/alpha", teams["alpha"])
    _endpoint(receiver.url + "/beta", teams["beta"])

    result = _rug_pull(server, "read_file")
    now = tool_of(server, "read_file").definition_hash

    assert result.approvals_dropped == ["read_file"]
    results = run_tasks(sent_tasks)
    assert {r.get() for r in results} == {DeliveryState.DELIVERED}
    mail = _mail(smtp_inbox)
    # The admins who may approve tools, and the owners of alpha (whole server) and gamma (the
    # tool); not beta (it holds another tool), not members, not staff who decide nothing.
    assert [to for to, _, _ in mail] == [
        "alpha-owner@example.com",
        "gamma-owner@example.com",
        "root@example.com",
        "vetter@example.com",
    ]
    by_address = {to: (subject, body) for to, subject, body in mail}
    to_admin = by_address["vetter@example.com"]
    assert to_admin[0].startswith("[Toolroom] ")
    assert "review needed" in to_admin[0]
    assert f"read_file: {approved[:12]} approved, {now[:12]} now" in to_admin[1]
    assert "Teams that held them: Alpha, Gamma." in to_admin[1]
    to_owner = by_address["gamma-owner@example.com"]
    assert "changed upstream, waiting for review" in to_owner[0]
    assert "- read_file" in to_owner[1]
    assert "/portal/teams/gamma/" in to_owner[1]

    posts = {path: (headers, json.loads(body)) for path, headers, body in receiver.requests}
    assert sorted(posts) == ["/alpha", "/global"]  # beta's endpoint hears nothing
    headers, payload = posts["/global"]
    assert headers["X-Toolroom-Event"] == "tool.definition_changed"
    assert payload["event"] == "tool.definition_changed"
    assert payload["server"] == "files"
    assert payload["teams"] == ["alpha", "gamma"]
    assert payload["tools"] == [
        {"name": "read_file", "approved_definition_hash": approved, "definition_hash": now}
    ]
    assert posts["/alpha"][1]["teams"] == ["alpha"]  # a team's endpoint: that team alone


def test_a_change_to_a_tool_that_was_not_approved_tells_no_one(
    world,
    smtp_inbox,  # noqa: F811
    sent_tasks,  # noqa: F811
):
    server = world["server"]
    server_services.tool_revoke(actor="test", tool=tool_of(server, "write_file"), reason="no")
    sent_tasks.clear()

    _rug_pull(server, "write_file")

    assert not EmailNotification.objects.filter(event=changes.TOOL_CHANGED).exists()
    assert not [name for name, _ in sent_tasks if name == task_queue.NOTIFICATION_EMAIL]


def test_the_portal_says_changed_upstream_waiting_for_review(world, client):
    server, teams = world["server"], world["teams"]
    _rug_pull(server, "read_file")
    client.force_login(teams["gamma"].memberships.get(level="member").user)

    home = client.get("/portal/").content.decode()
    team_page = client.get("/portal/teams/gamma/").content.decode()
    browse = client.get("/portal/browse/?team=gamma").content.decode()

    for page in (home, team_page):
        assert "<code>files/read_file</code>: <strong>changed upstream, waiting for review" in page
    assert 'read_file</code> <span class="muted">(read, <strong>changed upstream' in browse
    assert "not approved yet" not in browse
    # beta holds list_dir only: no notice.
    client.force_login(teams["beta"].memberships.get(level="member").user)
    assert "changed upstream" not in client.get("/portal/teams/beta/").content.decode()


@pytest.mark.usefixtures("local_webhooks")
def test_a_suspended_then_retired_server_tells_the_server_deciders_and_owners_each_time(
    world,
    smtp_inbox,  # noqa: F811
    receiver,  # noqa: F811
    sent_tasks,  # noqa: F811
    client,
):
    server, teams = world["server"], world["teams"]
    _endpoint(receiver.url + "/global")

    server_services.server_suspend(actor="test", server=server, reason="incident 42")
    run_tasks(sent_tasks)

    mail = _mail(smtp_inbox)
    assert [to for to, _, _ in mail] == [
        "alpha-owner@example.com",
        "beta-owner@example.com",
        "gamma-owner@example.com",
        "operator@example.com",
        "root@example.com",
    ]
    assert all(subject.endswith(f"{server.name} was suspended") for _, subject, _ in mail)
    owner_body = mail[0][2]
    assert "was suspended: incident 42" in owner_body
    assert "Your team Alpha holds access to it" in owner_body
    [(_, headers, body)] = receiver.requests
    assert headers["X-Toolroom-Event"] == "server.suspended"
    assert json.loads(body)["teams"] == ["alpha", "beta", "gamma"]
    client.force_login(teams["beta"].memberships.get(level="member").user)
    page = client.get("/portal/teams/beta/").content.decode()
    assert (
        f"<strong>{server.name}</strong>: suspended (incident 42). None of its tools can be called."
        in (page)
    )

    smtp_inbox.messages.clear()
    server_services.server_retire(actor="test", server=server, reason="replaced")
    # Retiring also asks the workers to clean the server's sandbox network: not run here.
    sent_tasks[:] = [
        sent
        for sent in sent_tasks
        if sent[0] in (task_queue.NOTIFICATION_EMAIL, task_queue.WEBHOOK_DELIVER)
    ]
    run_tasks(sent_tasks)

    assert len(smtp_inbox.messages) == 5
    assert {m["Subject"].rsplit(" ", 1)[-1] for m in smtp_inbox.messages} == {"retired"}
    assert json.loads(receiver.requests[-1][2])["event"] == "server.retired"


def test_access_about_to_end_is_mailed_to_the_owners_once_per_end(
    world,
    smtp_inbox,  # noqa: F811
    sent_tasks,  # noqa: F811
):
    server, teams = world["server"], world["teams"]
    soon = timezone.now() + timedelta(days=3)
    team_services.grant_create(actor="test", team=teams["gamma"], server=server, expires_at=soon)
    Grant.objects.filter(team=teams["alpha"]).update(expires_at=timezone.now() + timedelta(days=30))
    sent_tasks.clear()

    assert changes.grants_expiring_notify() == 1
    run_tasks(sent_tasks)

    [message] = smtp_inbox.messages
    assert message["X-Envelope-To"] == "gamma-owner@example.com"
    assert message["Subject"] == "[Toolroom] Gamma: access ending soon"
    assert f"- {server.name} ends {soon:%Y-%m-%d}" in message.get_payload()
    assert changes.grants_expiring_notify() == 0  # told once

    later = soon + timedelta(days=5)
    server_grant = Grant.objects.get(team=teams["gamma"], tool__isnull=True)
    team_services.grant_create(actor="test", team=teams["gamma"], server=server, expires_at=later)
    server_grant.refresh_from_db()
    assert server_grant.expires_at == later
    assert server_grant.expiry_notice_sent_at is None
    assert changes.grants_expiring_notify() == 1  # a new end: told again
    assert WebhookDelivery.objects.count() == 0  # no endpoint: no delivery
