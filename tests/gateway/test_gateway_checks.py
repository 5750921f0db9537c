"""The call-check selector on its own: one decision with reasons, from the version-keyed cache
(a warm call with nothing changed makes no database query), and each rule refusing."""

from __future__ import annotations

import pytest

from registry.access import private_data, rules
from registry.gateway import checks
from registry.gateway.checks import call_check
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


def _check(token, name, arguments=None):
    return call_check(
        identity=token_authenticate(token.plain),
        name=name,
        arguments={"value": "x"} if arguments is None else arguments,
    )


@pytest.mark.usefixtures("no_periodic_queries")
def test_a_warm_call_with_nothing_changed_makes_no_query(setup, django_assert_num_queries):
    _, _, token = setup
    assert _check(token, "files__read_file").allowed  # builds the table (cold)

    with django_assert_num_queries(0):
        decision = _check(token, "files__read_file")

    assert decision.allowed
    assert decision.target is not None
    assert decision.target.tool_name == "read_file"


@pytest.mark.usefixtures("no_periodic_queries")
def test_the_cold_table_costs_a_constant_number_of_queries(setup, django_assert_num_queries):
    _, _, token = setup
    identity = token_authenticate(token.plain)
    with django_assert_num_queries(3):  # the role, its grants, the granted tools; state cached
        call_check(identity=identity, name="files__read_file", arguments={})


def test_a_change_is_seen_on_the_next_check(setup, committed):
    team, _, token = setup
    assert _check(token, "files__read_file").allowed
    with committed():
        team_services.grant_revoke(actor="test", grant=team.grants.get(), reason="done")

    decision = _check(token, "files__read_file")

    assert (decision.allowed, decision.code) == (False, rules.UNKNOWN_TOOL)


def test_a_role_without_the_class_is_refused_with_the_reason(setup, committed):
    team, _, _ = setup
    with committed():
        review = AgentTokenFactory(team=team, role=team.roles.get(name="review"))

    decision = _check(review, "files__write_file")

    assert (decision.allowed, decision.code) == (False, rules.ROLE_FORBIDS)
    assert decision.message == (
        "The role 'review' may call read tools only; 'files__write_file' is a write tool."
    )
    assert decision.server_slug == "files"


def test_arguments_must_match_the_approved_schema(setup):
    _, _, token = setup

    decision = _check(token, "files__read_file", arguments={"value": 3})

    assert decision.code == checks.INVALID_ARGUMENTS
    assert "3 is not of type 'string' (at 'value')" in decision.message


MAIL_SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
    "required": ["to"],
}


def _mail_server(slug, schema):
    from registry.servers import services as server_services
    from tests.factories import McpServerFactory, ToolFactory, tool_definition

    server = McpServerFactory(slug=slug)
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    tool = ToolFactory(
        server=server, name="send", definition=tool_definition("send", inputSchema=schema)
    )
    server_services.tool_approve(actor="test", tool=tool)
    return server


def test_an_argument_the_approved_schema_does_not_declare_is_refused(setup, committed):
    """Issue 26, low 1: `bcc` passed through to the server; JSON Schema lets undeclared
    properties through unless the schema says otherwise, so the gateway says otherwise."""
    team, _, token = setup
    with committed():
        GrantFactory(team=team, server=_mail_server("mail", MAIL_SCHEMA))

    refused = _check(token, "mail__send", {"to": "a@example.com", "bcc": "thief@example.net"})

    assert refused.code == checks.INVALID_ARGUMENTS
    assert "'bcc' was unexpected" in refused.message
    assert _check(token, "mail__send", {"to": "a@example.com", "subject": "hi"}).allowed


def test_a_schema_that_allows_other_properties_or_composes_keeps_its_own_rule(setup, committed):
    team, _, token = setup
    composed = {
        "type": "object",
        "allOf": [{"properties": {"to": {"type": "string"}}}],
        "properties": {"subject": {"type": "string"}},
    }
    with committed():
        GrantFactory(
            team=team, server=_mail_server("open", {**MAIL_SCHEMA, "additionalProperties": True})
        )
        GrantFactory(team=team, server=_mail_server("composed", composed))

    assert _check(token, "open__send", {"to": "a@example.com", "bcc": "b@example.com"}).allowed
    assert _check(token, "composed__send", {"to": "a@example.com", "subject": "hi"}).allowed
    refused = _check(token, "composed__send", {"to": "a@example.com", "bcc": "b@example.com"})
    assert refused.code == checks.INVALID_ARGUMENTS


def test_a_server_not_callable_through_the_gateway_is_refused(setup, committed):
    _, server, token = setup
    with committed():
        server_gateway_policy_set(actor="test", server=server, mode="not_callable")

    decision = _check(token, "files__read_file")

    assert decision.code == rules.NOT_CALLABLE


def _mark(token, seconds=3600):
    private_data.private_data_mark(
        caller=token_authenticate(token.plain), server_slug="files", seconds=seconds
    )


def test_the_private_data_ratchet_refuses_the_tokens_connect_tools_after_confidential_data(
    setup, committed
):
    team, _, token = setup
    with committed():
        other = AgentTokenFactory(team=team)
    assert _check(token, "files__fetch_url").allowed

    _mark(token)

    refused = _check(token, "files__fetch_url")
    assert refused.code == rules.PRIVATE_DATA_RATCHET
    assert "read confidential data (from 'files')" in refused.message
    assert _check(token, "files__read_file").allowed  # read tools still go
    assert _check(other, "files__fetch_url").allowed  # another token holds no mark


def _ratchet_seconds_left(token):
    """What Redis says is left of the token's mark (Django's Redis cache)."""
    from registry.core.cache import hot_cache

    backend = hot_cache()
    [subject] = private_data.ratchet_subjects(token_authenticate(token.plain))
    key = backend.make_and_validate_key("gateway-ratchet:" + subject)
    return backend._cache.get_client(key, write=True).ttl(key), key


def test_the_mark_lasts_the_teams_window_from_the_last_private_read(setup, committed, settings):
    """The window is the team's (else the installation's default), and each private read renews
    it, so no clock boundary resets the ratchet."""
    settings.TOOLROOM_GATEWAY_RATCHET_WINDOW_SECONDS = 7200
    team, _, token = setup
    assert _check(token, "files__read_file").ratchet_seconds == 7200  # the default
    with committed():
        team_services.team_ratchet_window_set(actor="test", team=team, seconds=600)

    decision = _check(token, "files__read_file")
    assert decision.ratchet_seconds == 600  # the team's own, seen at once (version bump)
    _mark(token, decision.ratchet_seconds)
    left, _ = _ratchet_seconds_left(token)
    assert 590 <= left <= 600


def test_the_gateway_mode_decides_which_runtimes_are_kept_warm(committed):
    """always warm: started and kept; on demand: kept while a call's demand lasts, stopped
    (when held) once it has passed; not callable: never started for the gateway."""
    from datetime import timedelta

    from django.utils import timezone

    from registry.gateway import runtimes
    from registry.gateway.models import ServerGatewayPolicy
    from registry.gateway.runtimes import server_runtime_demand
    from registry.servers.jobs.runtime import runtime_reconcile_plan
    from registry.servers.models import ServerStatus
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


@pytest.mark.usefixtures("no_periodic_queries")
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
    assert known[0].caller.token_id == token.pk
    assert known[1] == second[1]

    with committed():
        team_services.agent_token_revoke(actor="test", token=token, reason="leaked")

    from workers.gateway.auth import TokenRefused

    with pytest.raises(TokenRefused, match="The agent token was revoked"):
        checked.authenticate(plain=token.plain)
