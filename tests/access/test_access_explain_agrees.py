"""The access rules (registry/access/rules.py) exist once: the gateway's call check and the
explanation both evaluate them, each on its own reading of the database (the call table's rows, the
explanation's records), and the catalogue keeps only its query of what is visible. For every
registry hypothesis draws (grants of servers and tools for all roles or one, with no, future or
past expiry; roles with random permission classes; admin overrides of a tool's class; server
states; approvals, revocations, rug pulls and removals; health and the hide setting; gateway modes;
open circuits; tokens that read private data), and for every (team, role, tool), the
rules' catalogue verdict equals membership in `catalogue_for_agent`'s output, and the call verdict
and code the explanation reads from the rules equal what `call_check` decides from them; and the
bulk forms (`team_access_report`, `tool_access_overview`) say the same. Likewise for every (team,
role, resource, resource template, prompt), each approved, awaiting approval, hidden or changed
since its approval: `item_explain`'s catalogue verdict equals whether the gateway lists it
(`agent_content`), and its code what the gateway answers a read or a get with (`resource_lookup`,
`content_refusal`); a concrete URI expanded from a template (two templates match some) is
explained as the template `item_for_agent_name` matches it to, and the gateway reads it through
that one, or neither knows it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from registry.access.explain import (
    RULE_RATCHET,
    AccessExplanation,
    access_explain,
    team_access_report,
    tool_access_overview,
)
from registry.access.explain_items import item_explain, item_for_agent_name
from registry.access.private_data import private_data_mark
from registry.access.rule_types import Kind
from registry.access.rules import ALLOWED, UNKNOWN_TOOL
from registry.catalogue.naming import namespaced_uri
from registry.catalogue.selectors import catalogue_for_agent
from registry.core.process_cache import forget_all
from registry.gateway.checks import call_check
from registry.gateway.content import (
    ContentEntry,
    agent_content,
    content_refusal,
    resource_lookup,
)
from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.gateway_policy import GatewayMode
from registry.servers.models import (
    CircuitState,
    Health,
    McpServer,
    PermissionClass,
    ServerPrompt,
    ServerResource,
    ServerStatus,
    Tool,
    Transport,
)
from registry.servers.policy import TrustTier
from registry.servers.vetting import tool_sync
from registry.teams import services
from registry.teams.callers import Caller
from registry.teams.models import Grant, Team
from registry.teams.tokens import token_authenticate
from tests.catalogue_helpers import CONNECT, READ, WRITE
from tests.factories import tool_definition

pytestmark = [pytest.mark.django_db, pytest.mark.exhaustive]

SERVERS = ("s0", "s1", "s2")
TOOLS = {"look": READ, "change": WRITE, "call_out": CONNECT}
TEAMS = ("alpha", "beta")
ROLES = ("review", "implementation", "operations")
CLASS_SETS = (
    {"read"},
    {"write"},
    {"connect"},
    {"read", "write"},
    {"read", "connect"},
    {"read", "write", "connect"},
)
# Repeats weight the draw towards usable tools, so that every verdict and code is reached.
SERVER_STATES = ("approved", "approved", "approved", "suspended", "pending_review")
TOOL_STATES = ("approved",) * 4 + ("unapproved", "revoked", "rug_pulled", "removed")
MODES = (
    GatewayMode.ON_DEMAND,
    GatewayMode.ON_DEMAND,
    GatewayMode.ALWAYS_WARM,
    GatewayMode.NOT_CALLABLE,
)
HEALTHS = (Health.HEALTHY, Health.UNHEALTHY, Health.UNKNOWN, Health.DEGRADED)
EXPIRIES = ("never", "future", "past")
# Each server's resource, two resource templates and prompt. The older template (listed first)
# also matches the URIs the newer one expands to: the gateway reads those through the older.
ITEMS = ("memo://greeting", "memo://notes/{id}", "summarise", "memo://{section}/{id}")
# Concrete URIs read through the templates: both match the first, the older one the second,
# neither the third (`{id}` never spans a `/`).
EXPANDED_URIS = ("memo://notes/42", "memo://drafts/7", "memo://notes/4/2")
ITEM_STATES = ("approved", "approved", "pending", "hidden", "changed")


def item_definitions(*, changed: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The items as a server lists them (those in `changed` with another description)."""

    def describe(key: str) -> str:
        return f"{key}, changed." if key in changed else f"{key}."

    return {
        "resources": [
            {"uri": ITEMS[0], "name": "greeting", "description": describe(ITEMS[0])},
            {"uriTemplate": ITEMS[3], "name": "memo", "description": describe(ITEMS[3])},
            {"uriTemplate": ITEMS[1], "name": "note", "description": describe(ITEMS[1])},
        ],
        "prompts": [{"name": ITEMS[2], "description": describe(ITEMS[2])}],
    }


def server_item(server: McpServer, key: str) -> ServerResource | ServerPrompt:
    if key == ITEMS[2]:
        return ServerPrompt.objects.get(server=server, name=key)
    return ServerResource.objects.get(server=server, uri=key)


grant_specs = st.fixed_dictionaries(
    {
        "team": st.sampled_from(TEAMS),
        "server": st.sampled_from(SERVERS),
        "tool": st.one_of(st.none(), st.sampled_from(tuple(TOOLS))),
        "role": st.sampled_from((None, None, *ROLES)),
        "expiry": st.sampled_from(EXPIRIES),
    }
)
worlds = st.fixed_dictionaries(
    {
        "servers": st.fixed_dictionaries({s: st.sampled_from(SERVER_STATES) for s in SERVERS}),
        "health": st.fixed_dictionaries({s: st.sampled_from(HEALTHS) for s in SERVERS}),
        "mode": st.fixed_dictionaries({s: st.sampled_from(MODES) for s in SERVERS}),
        "circuit_open": st.fixed_dictionaries(
            {s: st.sampled_from((False, False, True)) for s in SERVERS}
        ),
        "tools": st.fixed_dictionaries(
            {(s, t): st.sampled_from(TOOL_STATES) for s in SERVERS for t in TOOLS}
        ),
        "overrides": st.fixed_dictionaries(
            {
                (s, t): st.sampled_from(("", "", "", *PermissionClass.values))
                for s in SERVERS
                for t in TOOLS
            }
        ),
        "roles": st.fixed_dictionaries(
            {(team, role): st.sampled_from(CLASS_SETS) for team in TEAMS for role in ROLES}
        ),
        "grants": st.lists(grant_specs, min_size=3, max_size=10),
        "hide_unhealthy": st.booleans(),
        "private_data_read": st.booleans(),
        "items": st.fixed_dictionaries(
            {(s, key): st.sampled_from(ITEM_STATES) for s in SERVERS for key in ITEMS}
        ),
    }
)


def build_world(world: dict[str, Any], *, with_items: bool = False) -> dict[str, Any]:
    """Make the world through the services (states only workers write are set as they would);
    `with_items`: each server's resource, resource template and prompt too."""
    items = item_definitions if with_items else lambda **_: {}
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
        definitions = [tool_definition(t, annotations=a) for t, a in TOOLS.items()]
        tool_sync.server_tools_sync(server=server, tools=definitions, **items())
        server_services.server_submit_for_review(actor="test", server=server)
        if world["servers"][slug] != "pending_review":
            server_services.server_approve(actor="test", server=server)
        servers[slug] = server
    for slug, server in servers.items():
        relisted = []
        for name, hints in TOOLS.items():
            state = world["tools"][(slug, name)]
            tool = Tool.objects.get(server=server, name=name)
            if world["overrides"][(slug, name)]:
                server_services.tool_set_permission_class(
                    actor="test", tool=tool, permission_class=world["overrides"][(slug, name)]
                )
            if state != "unapproved":
                server_services.tool_approve(actor="test", tool=tool)
            if state == "revoked":
                server_services.tool_revoke(actor="test", tool=tool, reason="test")
            if state == "rug_pulled":
                relisted.append(tool_definition(name, annotations=hints, description="Now worse."))
            elif state != "removed":
                relisted.append(tool_definition(name, annotations=hints))
        for key in ITEMS if with_items else ():
            state = world["items"][(slug, key)]
            if state in {"approved", "changed"}:
                server_services.item_approve(actor="test", item=server_item(server, key))
            elif state == "hidden":
                server_services.item_hide(actor="test", item=server_item(server, key))
        changed = frozenset(key for key in ITEMS if world["items"][(slug, key)] == "changed")
        tool_sync.server_tools_sync(server=server, tools=relisted, **items(changed=changed))
        if world["servers"][slug] == "suspended":
            server_services.server_suspend(actor="test", server=server, reason="test")
        server_gateway_policy_set(actor="test", server=server, mode=world["mode"][slug])
        circuit = CircuitState.OPEN if world["circuit_open"][slug] else CircuitState.CLOSED
        ServerStatus.objects.filter(server=server).update(
            health=world["health"][slug], circuit_state=circuit
        )

    teams = {slug: services.team_create(actor="test", slug=slug) for slug in TEAMS}
    for (team_slug, role_name), classes in world["roles"].items():
        services.role_update(
            actor="test",
            role=teams[team_slug].roles.get(name=role_name),
            changes={f"allows_{pc}": pc in classes for pc in PermissionClass.values},
        )
    now = timezone.now()
    for spec in world["grants"]:
        team = teams[spec["team"]]
        if spec["tool"] and world["tools"][(spec["server"], spec["tool"])] == "removed":
            continue  # refused by grant_create: the server no longer offers it
        grant = services.grant_create(
            actor="test",
            team=team,
            server=servers[spec["server"]],
            tool=Tool.objects.get(server=servers[spec["server"]], name=spec["tool"])
            if spec["tool"]
            else None,
            role=team.roles.get(name=spec["role"]) if spec["role"] else None,
            expires_at=now + timedelta(days=1) if spec["expiry"] == "future" else None,
        )
        if spec["expiry"] == "past":  # it expired since: no service wrote anything when it did
            Grant.objects.filter(pk=grant.pk).update(expires_at=now - timedelta(seconds=1))
    return teams


def without_ratchet(explanation: AccessExplanation) -> tuple[tuple[str, bool], ...]:
    return tuple((r.rule, r.passed) for r in explanation.rules if r.rule != RULE_RATCHET)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(world=worlds)
def test_the_explanation_agrees_with_the_catalogue_and_the_call_check(world, local_cache):
    local_cache.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY = world["hide_unhealthy"]
    cache.clear()
    forget_all()  # the call tables and the gateway's content (ids repeat after each rollback)
    with transaction.atomic():
        teams = build_world(world)
        tools = list(Tool.objects.select_related("server"))
        codes: set[str] = set()
        in_catalogues: set[tuple[int, int]] = set()  # (role, tool)
        # (role, tool): which rules pass, but the ratchet (the bulk forms take no caller)
        outcomes: dict[tuple[int, int], tuple[tuple[str, bool], ...]] = {}
        for team in teams.values():
            for role in team.roles.all():
                catalogue = {
                    t.tool_id for t in catalogue_for_agent(team_id=team.pk, role_id=role.pk).tools
                }
                in_catalogues |= {(role.pk, tool_id) for tool_id in catalogue}
                token = services.agent_token_create(
                    actor="test", team=team, role=role, name=f"agent-{role.name}"
                )
                identity = token_authenticate(token.plain)
                if world["private_data_read"]:
                    private_data_mark(caller=identity, server_slug="vault", seconds=600)
                for tool in tools:
                    explanation = access_explain(team=team, role=role, tool=tool, caller=identity)
                    decision = call_check(
                        identity=identity, name=explanation.name, arguments={"value": "x"}
                    )
                    where = (team.slug, role.name, explanation.name)
                    assert explanation.in_catalogue == (tool.pk in catalogue), where
                    assert explanation.callable == decision.allowed, where
                    assert explanation.code == decision.code, (where, decision.message)
                    codes.add(decision.code)
                    outcomes[(role.pk, tool.pk)] = without_ratchet(explanation)
        # The bulk forms (the admin's and the auditors') agree too.
        reported = {
            (explanation.role_id, explanation.tool_id)
            for team in teams.values()
            for explanation in team_access_report(team=team)
        }
        assert reported == in_catalogues
        for tool in tools:
            overview = {
                (explanation.role_id, tool.pk): without_ratchet(explanation)
                for explanation in tool_access_overview(tool=tool)
            }
            assert overview == {key: v for key, v in outcomes.items() if key[1] == tool.pk}
        for code in codes:
            event(f"code {code}")
        transaction.set_rollback(True)
    assert not McpServer.objects.exists()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(world=worlds)
def test_the_item_explanation_agrees_with_the_gateway(world, local_cache):
    local_cache.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY = world["hide_unhealthy"]
    cache.clear()
    forget_all()
    with transaction.atomic():
        teams = build_world(world, with_items=True)
        codes: set[str] = set()
        for team in teams.values():
            for role in team.roles.all():
                token = services.agent_token_create(
                    actor="test", team=team, role=role, name=f"agent-{role.name}"
                )
                codes |= items_agree(team, role, token_authenticate(token.plain))
        for code in codes:
            event(f"code {code}")
        transaction.set_rollback(True)
    assert not McpServer.objects.exists()


def items_agree(team: Team, role: Any, identity: Caller) -> set[str]:
    """For every resource, template and prompt: the explanation says what the gateway does (it
    lists the item, and answers a read or a get with the same code). The codes seen."""
    content = agent_content(identity=identity)
    listed = {
        *(r["uri"] for r in content.listed_resources()),
        *(t["uriTemplate"] for t in content.listed_templates()),
        *(p["name"] for p in content.listed_prompts()),
    }
    codes = set()
    items: list[ServerResource | ServerPrompt] = [
        *ServerResource.objects.select_related("server"),
        *ServerPrompt.objects.select_related("server"),
    ]
    for item in items:
        explanation = item_explain(team=team, role=role, item=item, caller=identity)
        where = (team.slug, role.name, explanation.name, item.review_state)
        assert explanation.in_catalogue == (explanation.name in listed), where
        if isinstance(item, ServerResource) and item.is_template:
            continue  # read through a URI expanded from it: below
        if isinstance(item, ServerPrompt):
            entry = content.prompts.get(explanation.name)
        else:
            entry = resource_lookup(content, explanation.name)
        code = gateway_code(entry, identity)
        assert explanation.code == code, where
        assert explanation.callable == (code == ALLOWED), where
        codes.add(f"{explanation.kind} {code}")
    # A concrete URI is explained as the template the gateway reads it through (none: the team
    # may not ask about it, and the gateway knows no such URI).
    for server in McpServer.objects.all():
        for upstream in EXPANDED_URIS:
            uri = namespaced_uri(server.slug, upstream)
            code = gateway_code(resource_lookup(content, uri), identity)
            found = item_for_agent_name(team=team, kind=Kind.RESOURCE, name=uri)
            if found is None:
                assert code == UNKNOWN_TOOL, (team.slug, role.name, uri)
                continue
            explanation = item_explain(
                team=team, role=role, item=found, caller=identity, expanded_uri=uri
            )
            seen = (team.slug, role.name, uri, explanation.name, found.review_state)
            assert explanation.code == code, seen
            assert explanation.callable == (code == ALLOWED), seen
            codes.add(f"expanded through {found.uri}: {code}")
    return codes


def gateway_code(entry: ContentEntry | None, identity: Caller) -> str:
    """What the gateway answers a read or a get of the entry (none: it knows no such name)."""
    refusal = content_refusal(entry, identity=identity) if entry is not None else None
    return UNKNOWN_TOOL if entry is None else refusal.code if refusal else ALLOWED


@pytest.fixture
def local_cache(settings):
    """A cache of the test's own (cleared per example: ids repeat after each rollback)."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    return settings
