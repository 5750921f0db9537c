"""The call-check selector on its own: one decision with reasons, from the version-keyed cache
(a warm call with nothing changed makes no database query), and each rule refusing."""

from __future__ import annotations

import pytest

from registry.gateway import calls as checks
from registry.gateway.calls import call_check
from registry.gateway.services import server_gateway_policy_set
from registry.teams import services as team_services
from registry.teams.tokens import token_authenticate
from tests.catalogue_helpers import CONNECT, READ, WRITE, approved_server
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def setup(committed):
    checks._tables.clear()
    with committed():
        team = TeamFactory(slug="alpha")
        server = approved_server(
            "files", {"read_file": READ, "write_file": WRITE, "fetch_url": CONNECT}
        )
        GrantFactory(team=team, server=server)
        token = AgentTokenFactory(team=team)
    return team, server, token


def _check(token, name, arguments=None, conversation=""):
    return call_check(
        identity=token_authenticate(token.plain),
        name=name,
        arguments={"value": "x"} if arguments is None else arguments,
        conversation=conversation,
    )


def test_a_warm_call_with_nothing_changed_makes_no_query(setup, django_assert_num_queries):
    _, _, token = setup
    assert _check(token, "files__read_file").allowed  # builds the table (cold)

    with django_assert_num_queries(0):
        decision = _check(token, "files__read_file")

    assert decision.allowed
    assert decision.target is not None
    assert decision.target.tool_name == "read_file"


def test_the_cold_table_costs_a_constant_number_of_queries(setup, django_assert_num_queries):
    _, _, token = setup
    identity = token_authenticate(token.plain)
    with django_assert_num_queries(5):  # catalogue (3), grants, tools; the state is cached
        call_check(identity=identity, name="files__read_file", arguments={}, conversation="")


def test_a_change_is_seen_on_the_next_check(setup, committed):
    team, _, token = setup
    assert _check(token, "files__read_file").allowed
    with committed():
        team_services.grant_revoke(actor="test", grant=team.grants.get(), reason="done")

    decision = _check(token, "files__read_file")

    assert (decision.allowed, decision.code) == (False, checks.UNKNOWN_TOOL)


def test_a_role_without_the_class_is_refused_with_the_reason(setup, committed):
    team, _, _ = setup
    with committed():
        review = AgentTokenFactory(team=team, role=team.roles.get(name="review"))

    decision = _check(review, "files__write_file")

    assert (decision.allowed, decision.code) == (False, checks.ROLE_FORBIDS)
    assert decision.message == (
        "The role 'review' may call read tools only; 'files__write_file' is a write tool."
    )
    assert decision.server_slug == "files"


def test_arguments_must_match_the_approved_schema(setup):
    _, _, token = setup

    decision = _check(token, "files__read_file", arguments={"value": 3})

    assert decision.code == checks.INVALID_ARGUMENTS
    assert "3 is not of type 'string' (at 'value')" in decision.message


def test_a_server_not_callable_through_the_gateway_is_refused(setup, committed):
    _, server, token = setup
    with committed():
        server_gateway_policy_set(actor="test", server=server, mode="not_callable")

    decision = _check(token, "files__read_file")

    assert decision.code == checks.NOT_CALLABLE


def test_the_private_data_ratchet_refuses_connect_tools_after_confidential_data(setup):
    _, _, token = setup
    assert _check(token, "files__fetch_url", conversation="c1").allowed

    checks.conversation_mark_private_data(conversation="c1", server_slug="files")

    refused = _check(token, "files__fetch_url", conversation="c1")
    assert refused.code == checks.PRIVATE_DATA_RATCHET
    assert "read confidential data (from 'files')" in refused.message
    assert _check(token, "files__read_file", conversation="c1").allowed  # read tools still go
    assert _check(token, "files__fetch_url", conversation="c2").allowed  # other conversations


def _ratchet_entry(conversation):
    """The Redis client and key of a conversation's private-data mark (Django's Redis cache)."""
    from registry.core.cache import hot_cache

    backend = hot_cache()
    key = backend.make_and_validate_key(checks._ratchet_key(conversation))
    return backend._cache.get_client(key, write=True), key


def _ratchet_seconds_left(conversation):
    client, key = _ratchet_entry(conversation)
    return client.ttl(key)


def test_a_conversation_without_a_name_is_the_token_marked_for_a_sliding_window(setup, settings):
    """A stateless caller that names no conversation is its token: the mark lasts the window
    after its *last* private read (renewed by each), so no clock boundary resets the ratchet;
    a session or named conversation keeps its mark for a day."""
    settings.TOOLROOM_GATEWAY_CONVERSATION_WINDOW_SECONDS = 600
    _, _, token = setup
    unnamed = checks.token_conversation(token_authenticate(token.plain).token_id)

    checks.conversation_mark_private_data(conversation=unnamed, server_slug="files")

    assert _check(token, "files__fetch_url", conversation=unnamed).code == (
        checks.PRIVATE_DATA_RATCHET
    )
    assert 590 <= _ratchet_seconds_left(unnamed) <= 600
    client, key = _ratchet_entry(unnamed)
    client.expire(key, 5)  # most of the window has passed
    checks.conversation_mark_private_data(conversation=unnamed, server_slug="files")
    assert 590 <= _ratchet_seconds_left(unnamed) <= 600  # another private read renews it

    checks.conversation_mark_private_data(conversation="session:s1", server_slug="files")
    assert _ratchet_seconds_left("session:s1") > 23 * 3600


def test_the_gateway_mode_decides_which_runtimes_are_kept_warm(committed):
    """always warm: started and kept; on demand: kept while a call's demand lasts, stopped
    (when held) once it has passed; not callable: never started for the gateway."""
    from datetime import timedelta

    from django.utils import timezone

    from registry.gateway import runtimes
    from registry.gateway.models import ServerGatewayPolicy
    from registry.gateway.runtimes import server_runtime_demand
    from registry.servers.models import ServerStatus
    from registry.servers.operations.runtime import runtime_reconcile_plan
    from tests.factories import McpServerFactory

    runtimes._demand_written.clear()  # the write throttle is per process; ids repeat
    servers = {}
    for slug, mode in (("warm", "always_warm"), ("demand", "on_demand"), ("off", "not_callable")):
        servers[slug] = McpServerFactory(slug=slug, review_status="approved")
        with committed():
            server_gateway_policy_set(actor="test", server=servers[slug], mode=mode)

    plan = runtime_reconcile_plan()
    assert set(plan.start) == {servers["warm"].pk}

    server_runtime_demand(server_id=servers["demand"].pk, idle_stop_seconds=600, start=False)
    assert set(runtime_reconcile_plan().start) == {servers["warm"].pk, servers["demand"].pk}

    # Held by a live worker, then idle past its stop time: the reconcile stops it.
    ServerStatus.objects.filter(server=servers["demand"]).update(
        runtime_owner="runtime@host", runtime_heartbeat_at=timezone.now()
    )
    ServerGatewayPolicy.objects.filter(server=servers["demand"]).update(
        demanded_until=timezone.now() - timedelta(seconds=1)
    )
    plan = runtime_reconcile_plan()
    assert plan.stop == [(servers["demand"].pk, "runtime@host")]
    assert servers["off"].pk not in plan.start


def test_the_gateway_knows_a_checked_token_while_its_team_version_holds(
    setup, committed, django_assert_num_queries
):
    """The gateway's in-process token cache (workers/gateway/auth.py): a token checked after the
    team's version was read is known good without a lookup until the version moves; a revoke
    moves it, so the very next request checks the token again and is refused."""
    from registry.catalogue.versions import catalogue_state
    from registry.teams.tokens import token_lookup_evict_on_commit
    from workers.gateway.auth import CheckedTokens

    team, _, token = setup
    catalogue_state(team_id=team.pk)  # the cache holds the team's state (each call check reads it)
    checked = CheckedTokens()
    first = checked.authenticate(plain=token.plain)
    assert first is not None
    assert first[1] is None  # no version was read before this first check
    second = checked.authenticate(plain=token.plain)  # checked again, after reading the version
    assert second is not None
    assert second[1] is not None

    token_lookup_evict_on_commit(token.prefix)  # a lookup now would have to ask the database
    with django_assert_num_queries(0):
        known = checked.authenticate(plain=token.plain)
    assert known is not None
    assert known[0].agent.token_id == token.pk
    assert known[1] == second[1]

    with committed():
        team_services.agent_token_revoke(actor="test", token=token, reason="leaked")

    assert checked.authenticate(plain=token.plain) is None
