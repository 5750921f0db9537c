"""A person's upstream links are removed when they leave every team that holds the server, and an
unlinked OAuth account's tokens are revoked at the upstream (RFC 7009) when its authorization
server advertises a revocation endpoint: against the SDK's own authorization server handlers
(tests/mcp_servers/oauth_upstream.py), audited, best effort."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from django.test import Client as HttpClient
from django.utils import timezone

from registry.audit.models import AuditEvent
from registry.servers.models import McpServer, Transport, UpstreamAuth
from registry.teams import services as team_services
from registry.teams.models import Grant, MembershipLevel
from registry.upstream.models import UpstreamAccount, UpstreamClient
from tests.catalogue_helpers import READ, approved_server
from tests.factories import GrantFactory, TeamFactory, UserFactory
from tests.mcp_servers.oauth_upstream import RunningUpstream

SLUG = "tracker"


@pytest.fixture
def upstream():
    running = RunningUpstream()
    yield running
    running.stop()


@pytest.fixture
def world(upstream) -> dict[str, Any]:
    """alpha (alice, bob) and beta (bob) both hold `tracker`, a per-person server."""
    server = approved_server(SLUG, {"whoami": READ}, served=upstream.mcp)
    McpServer.objects.filter(pk=server.pk).update(
        transport=Transport.STREAMABLE_HTTP,
        url=upstream.url,
        command=[],
        upstream_auth=UpstreamAuth.PERSON_OAUTH,
    )
    alpha, beta = TeamFactory(slug="alpha"), TeamFactory(slug="beta")
    people = {name: UserFactory(username=name) for name in ("alice", "bob")}
    for team, names in ((alpha, ("alice", "bob")), (beta, ("bob",))):
        for name in names:
            team_services.team_member_set(
                actor="test", team=team, user=people[name], level=MembershipLevel.OWNER
            )
        GrantFactory(team=team, server=server)
    return {"server": server, "alpha": alpha, "beta": beta, **people}


def portal(person) -> HttpClient:
    http = HttpClient()
    http.force_login(person)
    return http


def link(person, upstream: RunningUpstream, subject: str) -> UpstreamAccount:
    """The upstream's code flow from the portal, the person signing in there as `subject`."""
    http = portal(person)
    started = http.post(f"/portal/accounts/{SLUG}/link/")
    sign_in = httpx2.get(started["Location"], follow_redirects=False)
    back = httpx2.get(f"{sign_in.headers['location']}&user={subject}", follow_redirects=False)
    callback = urlsplit(back.headers["location"])
    http.get(f"{callback.path}?{callback.query}")
    return UpstreamAccount.objects.get(person=person)


def held_by_upstream(upstream: RunningUpstream, subject: str) -> set[str]:
    """Which kinds of token the upstream still honours for `subject`."""
    kinds = set()
    if any(token.subject == subject for token in upstream.authority.access.values()):
        kinds.add("access")
    if any(token.subject == subject for token in upstream.authority.refresh.values()):
        kinds.add("refresh")
    return kinds


def summaries(action: str) -> list[str]:
    return list(
        AuditEvent.objects.filter(action=action).order_by("pk").values_list("summary", flat=True)
    )


@pytest.mark.django_db
def test_unlinking_revokes_the_tokens_at_the_upstream(
    world, upstream, django_capture_on_commit_callbacks
):
    link(world["alice"], upstream, "alice@upstream")
    assert UpstreamClient.objects.get().revocation_endpoint == f"{upstream.base}/revoke"
    assert held_by_upstream(upstream, "alice@upstream") == {"access", "refresh"}
    with django_capture_on_commit_callbacks(execute=True):
        portal(world["alice"]).post(f"/portal/accounts/{SLUG}/unlink/")
    assert not UpstreamAccount.objects.exists()
    assert held_by_upstream(upstream, "alice@upstream") == set()
    (revoked,) = summaries("upstream.token_revoked")
    assert revoked == "alice's account at tracker: revoked at the upstream."


@pytest.mark.django_db
def test_an_upstream_without_a_revocation_endpoint_or_unreachable_is_recorded_and_unlinks(
    world, upstream, django_capture_on_commit_callbacks
):
    link(world["alice"], upstream, "alice@upstream")
    link(world["bob"], upstream, "bob@upstream")
    UpstreamClient.objects.update(revocation_endpoint="")
    with django_capture_on_commit_callbacks(execute=True):
        portal(world["alice"]).post(f"/portal/accounts/{SLUG}/unlink/")
    assert held_by_upstream(upstream, "alice@upstream") == {"access", "refresh"}
    UpstreamClient.objects.update(revocation_endpoint=f"{upstream.base}/revoke")
    upstream.stop()
    with django_capture_on_commit_callbacks(execute=True):
        portal(world["bob"]).post(f"/portal/accounts/{SLUG}/unlink/")
    assert not UpstreamAccount.objects.exists()
    none, failed = summaries("upstream.token_revoked")
    assert none.endswith("not revoked at the upstream: it advertises no revocation endpoint.")
    assert failed.startswith("bob's account at tracker: revoking at the upstream failed (")
    assert "could not be reached" in failed


@pytest.mark.django_db
def test_a_person_who_leaves_every_team_holding_the_server_loses_the_link(
    world, upstream, django_capture_on_commit_callbacks
):
    link(world["alice"], upstream, "alice@upstream")
    link(world["bob"], upstream, "bob@upstream")
    # Bob leaves alpha, but beta holds the server too: his link stays.
    with django_capture_on_commit_callbacks(execute=True):
        team_services.team_member_remove(actor="test", team=world["alpha"], user=world["bob"])
    assert UpstreamAccount.objects.filter(person=world["bob"]).exists()
    # Alice leaves alpha, the only team of hers that holds it: her link goes, revoked upstream.
    with django_capture_on_commit_callbacks(execute=True):
        team_services.team_member_remove(actor="test", team=world["alpha"], user=world["alice"])
    assert not UpstreamAccount.objects.filter(person=world["alice"]).exists()
    assert held_by_upstream(upstream, "alice@upstream") == set()
    (unlinked,) = summaries("upstream.account_unlinked")
    assert "alice no longer belongs to a team that holds it" in unlinked
    # Beta's grant is revoked: bob no longer belongs to any team that holds it.
    with django_capture_on_commit_callbacks(execute=True):
        team_services.grant_revoke(
            actor="test", grant=Grant.objects.get(team=world["beta"]), reason="done"
        )
    assert not UpstreamAccount.objects.exists()
    assert held_by_upstream(upstream, "bob@upstream") == set()
    assert len(summaries("upstream.account_unlinked")) == 2
    assert len(summaries("upstream.token_revoked")) == 2


@pytest.mark.django_db
def test_a_deleted_team_takes_its_members_links_to_its_servers(
    world, upstream, django_capture_on_commit_callbacks
):
    link(world["alice"], upstream, "alice@upstream")
    with django_capture_on_commit_callbacks(execute=True):
        world["alpha"].delete()
    assert not UpstreamAccount.objects.exists()
    assert held_by_upstream(upstream, "alice@upstream") == set()


@pytest.mark.django_db
def test_links_whose_grants_merely_expired_are_swept_by_the_hourly_task(
    world, upstream, django_capture_on_commit_callbacks
):
    """No signal fires when a grant's time runs out: the beat task's sweep removes the link."""
    from django_celery_beat.models import PeriodicTask

    from workers.tasks import upstream_accounts_prune_task

    link(world["alice"], upstream, "alice@tracker")
    link(world["bob"], upstream, "bob@tracker")
    Grant.objects.filter(team=world["alpha"]).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )  # alice is only in alpha; bob is in beta too

    with django_capture_on_commit_callbacks(execute=True):
        assert upstream_accounts_prune_task() == 1

    assert list(UpstreamAccount.objects.values_list("person__username", flat=True)) == ["bob"]
    assert AuditEvent.objects.filter(action="upstream.account_unlinked").count() == 1
    assert held_by_upstream(upstream, "alice@tracker") == set()
    schedule = PeriodicTask.objects.get(task="toolroom.upstream_accounts_prune")
    assert (schedule.enabled, schedule.interval.every) == (True, 3600)
