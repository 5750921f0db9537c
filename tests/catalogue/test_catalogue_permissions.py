"""The permission matrix: teams x roles x grants x approvals x expiry x health. For every world
hypothesis draws, each agent's catalogue (through the API) equals exactly the set computed here,
independently of the selector; and team A never sees nor learns of team B's tools."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from registry.catalogue.naming import namespaced_tool_name
from registry.servers import services as server_services
from registry.servers.models import Health, McpServer, ServerStatus, Tool, Transport
from registry.servers.policy import TrustTier
from registry.servers.vetting import tool_sync
from registry.teams import services
from registry.teams.models import Grant
from tests.catalogue_helpers import CONNECT, READ, WRITE
from tests.factories import tool_definition

pytestmark = pytest.mark.django_db

SERVERS = ("s0", "s1", "s2")
TOOLS = {"look": ("read", READ), "change": ("write", WRITE), "call_out": ("connect", CONNECT)}
TEAMS = ("alpha", "beta")
ROLES = {
    "review": {"read"},
    "implementation": {"read", "write"},
    "operations": {"read", "write", "connect"},
}
SERVER_STATES = ("approved", "suspended", "pending_review")
TOOL_STATES = ("approved", "unapproved", "revoked", "rug_pulled", "removed")
HEALTHS = (Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN, Health.DEGRADED)
EXPIRIES = ("never", "future", "past")


@dataclass(frozen=True)
class GrantSpec:
    team: str
    server: str
    tool: str | None
    role: str | None
    expiry: str


grant_specs = st.builds(
    GrantSpec,
    team=st.sampled_from(TEAMS),
    server=st.sampled_from(SERVERS),
    tool=st.one_of(st.none(), st.sampled_from(tuple(TOOLS))),
    role=st.one_of(st.none(), st.sampled_from(tuple(ROLES))),
    expiry=st.sampled_from(EXPIRIES),
)
worlds = st.fixed_dictionaries(
    {
        "servers": st.fixed_dictionaries({s: st.sampled_from(SERVER_STATES) for s in SERVERS}),
        "health": st.fixed_dictionaries({s: st.sampled_from(HEALTHS) for s in SERVERS}),
        "tools": st.fixed_dictionaries(
            {(s, t): st.sampled_from(TOOL_STATES) for s in SERVERS for t in TOOLS}
        ),
        "grants": st.lists(grant_specs, max_size=8),
        "hide_unhealthy": st.booleans(),
    }
)


def expected_catalogue(world: dict[str, Any], team: str, role: str) -> set[str]:
    """What the team's agent of this role must see, by the rules and nothing else.

    Granting the same scope again changes that grant's expiry: the last spec of a scope wins.
    """
    grants = {(g.team, g.server, g.tool, g.role): g for g in world["grants"]}.values()
    visible = set()
    for server in SERVERS:
        if world["servers"][server] != "approved":
            continue
        if world["hide_unhealthy"] and world["health"][server] == Health.UNHEALTHY:
            continue
        for tool, (permission_class, _) in TOOLS.items():
            if world["tools"][(server, tool)] != "approved":
                continue
            if permission_class not in ROLES[role]:
                continue
            granted = any(
                g.team == team
                and g.server == server
                and g.tool in (None, tool)
                and g.role in (None, role)
                and g.expiry != "past"
                for g in grants
            )
            if granted:
                visible.add(namespaced_tool_name(server, tool))
    return visible


def build_world(world: dict[str, Any]) -> dict[tuple[str, str], str]:
    """Make the world through the services; return each team+role's agent token."""
    servers = {}
    for slug in SERVERS:
        server = server_services.server_create(
            actor="test",
            slug=slug,
            name=slug.upper(),
            transport=Transport.STDIO,
            command=["python", "-m", "x"],
            trust_tier=TrustTier.BUILTIN,
        )
        definitions = [tool_definition(t, annotations=a) for t, (_, a) in TOOLS.items()]
        tool_sync.server_tools_sync(server=server, tools=definitions)
        server_services.server_submit_for_review(actor="test", server=server)
        if world["servers"][slug] != "pending_review":
            server_services.server_approve(actor="test", server=server)
        servers[slug] = server
    for slug, server in servers.items():
        relisted = []
        for name, (_, hints) in TOOLS.items():
            state = world["tools"][(slug, name)]
            tool = Tool.objects.get(server=server, name=name)
            if state != "unapproved":
                server_services.tool_approve(actor="test", tool=tool)
            if state == "revoked":
                server_services.tool_revoke(actor="test", tool=tool, reason="test")
            if state == "rug_pulled":
                relisted.append(tool_definition(name, annotations=hints, description="Now worse."))
            elif state != "removed":
                relisted.append(tool_definition(name, annotations=hints))
        tool_sync.server_tools_sync(server=server, tools=relisted)
        if world["servers"][slug] == "suspended":
            server_services.server_suspend(actor="test", server=server, reason="test")
        ServerStatus.objects.filter(server=server).update(health=world["health"][slug])

    teams = {slug: services.team_create(actor="test", slug=slug) for slug in TEAMS}
    now = timezone.now()
    for spec in world["grants"]:
        team = teams[spec.team]
        expires_at = {"never": None, "future": now + timedelta(days=1), "past": None}[spec.expiry]
        if spec.tool and world["tools"][(spec.server, spec.tool)] == "removed":
            continue  # refused by grant_create: the server no longer offers it
        grant = services.grant_create(
            actor="test",
            team=team,
            server=servers[spec.server],
            tool=Tool.objects.get(server=servers[spec.server], name=spec.tool)
            if spec.tool
            else None,
            role=team.roles.get(name=spec.role) if spec.role else None,
            expires_at=expires_at,
        )
        if spec.expiry == "past":  # it expired since: no service wrote anything when it did
            Grant.objects.filter(pk=grant.pk).update(expires_at=now - timedelta(seconds=1))
    return {
        (team_slug, role): services.agent_token_create(
            actor="test", team=team, role=team.roles.get(name=role), name=f"{team_slug}-{role}"
        ).plain
        for team_slug, team in teams.items()
        for role in ROLES
    }


def catalogue_names(client: APIClient, token: str, fmt: str) -> set[str]:
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = client.get("/api/v1/catalogue", {"format": fmt})
    assert response.status_code == 200
    tools = response.json()["tools"]
    return {tool["function"]["name"] if fmt == "openai" else tool["name"] for tool in tools}


@pytest.mark.exhaustive
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(world=worlds)
def test_every_agent_sees_exactly_what_the_rules_allow(world, django_settings_for_matrix):
    django_settings_for_matrix.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY = world["hide_unhealthy"]
    cache.clear()
    client = APIClient()
    with transaction.atomic():
        tokens = build_world(world)
        for (team, role), token in tokens.items():
            expected = expected_catalogue(world, team, role)
            event(f"catalogue of {min(len(expected), 3)}+ tools")
            for fmt in ("native", "openai"):
                assert catalogue_names(client, token, fmt) == expected, (team, role, fmt)
        transaction.set_rollback(True)
    assert not McpServer.objects.exists()


@pytest.fixture
def django_settings_for_matrix(settings):
    """A cache of the test's own (cleared per example: ids repeat after each rollback)."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    return settings
