"""Query templates: a queryset compiled once per shape answers, for any values, exactly what the
queryset built with those values answers (converters included), and lists padded to a power of
two mean the same list."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest
from django.db import connections
from django.utils import timezone

from registry.core.query_templates import Placeholders, compiled_query, padded, padded_length
from registry.teams.models import Grant, TeamRole
from tests.catalogue_helpers import READ, approved_server
from tests.factories import GrantFactory, TeamFactory

pytestmark = pytest.mark.django_db


def test_lists_are_padded_to_the_next_power_of_two_with_their_last_value():
    assert [padded_length(n) for n in (0, 1, 2, 3, 5, 8, 9)] == [0, 1, 2, 4, 8, 8, 16]
    assert padded([]) == []
    assert padded([4, 7, 9]) == [4, 7, 9, 9]


def _active_grants(values: Placeholders, servers: int):
    return (
        Grant.objects.active(values.moment("now"))
        .filter(team_id=values.number("team_id"), server_id__in=values.numbers("servers", servers))
        .order_by()
        .values_list("server_id", "expires_at")
    )


def test_a_template_answers_what_the_queryset_with_the_values_answers():
    now = timezone.now()
    teams = [TeamFactory(), TeamFactory()]
    servers = [approved_server(f"s{n}", {"t": READ}) for n in range(3)]
    GrantFactory(team=teams[0], server=servers[0], expires_at=now + timedelta(hours=1))
    expired = GrantFactory(team=teams[0], server=servers[1])
    Grant.objects.filter(pk=expired.pk).update(expires_at=now - timedelta(hours=1))
    GrantFactory(team=teams[0], server=servers[2])
    GrantFactory(team=teams[1], server=servers[1])

    for team in teams:
        for chosen in ([servers[0].pk], [s.pk for s in servers], [servers[1].pk, servers[2].pk]):
            ids = padded(chosen)
            template = compiled_query(
                ("test-grants", len(ids)), partial(_active_grants, servers=len(ids))
            )
            got = template.run(now=now, team_id=team.pk, servers=ids)
            expected = (
                Grant.objects.active(now)
                .filter(team_id=team.pk, server_id__in=chosen)
                .order_by()
                .values_list("server_id", "expires_at")
            )
            assert sorted(map(tuple, got)) == sorted(expected)
    # Compiled once per shape, on this connection.
    first = compiled_query(("test-grants", 1), lambda values: _active_grants(values, 1))
    assert compiled_query(("test-grants", 1), lambda values: _active_grants(values, 1)) is first
    assert first.connection is connections["default"]


def test_converted_columns_come_back_as_the_queryset_gives_them():
    team = TeamFactory()
    role = TeamRole.objects.create(team=team, name="mixed", allows_read=False, allows_write=True)
    template = compiled_query(
        ("test-role",),
        lambda values: (
            TeamRole.objects.filter(pk=values.number("role"))
            .order_by()
            .values_list("allows_read", "allows_write", "team__slug")
        ),
    )

    [row] = template.run(role=role.pk)

    assert tuple(row) == (False, True, team.slug)  # booleans, not SQLite's 0 and 1
    assert all(type(value) is bool for value in row[:2])
    assert template.run(role=role.pk + 1000) == []


def test_a_shape_that_can_match_nothing_runs_no_query(django_assert_num_queries):
    template = compiled_query(
        ("test-nothing",),
        lambda values: TeamRole.objects.filter(pk=values.number("role"), name__in=[]).values_list(
            "pk"
        ),
    )
    with django_assert_num_queries(0):
        assert template.run(role=1) == []


def test_a_placeholder_the_sql_does_not_carry_as_it_was_is_refused():
    with pytest.raises(ValueError, match="placeholder"):
        compiled_query(
            ("test-changed",),
            lambda values: TeamRole.objects.filter(name__contains=values.text("part")).values_list(
                "pk"
            ),
        )
