"""`manage.py access_report`: every tool a team can use, with the grant and approval behind it."""

from __future__ import annotations

import csv
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from registry.gateway import checks
from registry.servers import services as server_services
from registry.teams import services as team_services
from tests.catalogue_helpers import READ, WRITE, approved_server, tool_of
from tests.factories import GrantFactory, TeamFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def world(committed):
    checks._tables.clear()
    with committed():
        alpha, beta = TeamFactory(slug="alpha"), TeamFactory(slug="beta")
        files = approved_server("files", {"read_file": READ, "write_file": WRITE})
        notes = approved_server("notes", {"jot": WRITE})
        GrantFactory(team=alpha, server=files, role=alpha.roles.get(name="review"))
        team_services.grant_create(
            actor="admin-erin",
            team=alpha,
            server=notes,
            tool=tool_of(notes, "jot"),
            note="quarterly notes",
        )
        GrantFactory(team=beta, server=notes)
        server_services.tool_revoke(actor="test", tool=tool_of(files, "write_file"), reason="x")
    return alpha


def run(*args):
    out = StringIO()
    call_command("access_report", *args, stdout=out)
    return out.getvalue()


def test_the_csv_lists_every_usable_tool_with_its_grant_and_approval(world):
    rows = list(csv.DictReader(StringIO(run("--team", "alpha"))))

    usable = sorted((row["role"], row["name"]) for row in rows)
    assert usable == [
        ("implementation", "notes__jot"),
        ("operations", "notes__jot"),
        ("review", "files__read_file"),
    ]
    jot = next(row for row in rows if row["role"] == "operations")
    assert (jot["grant_scope"], jot["grant_role"], jot["granted_by"]) == (
        "tool",
        "(every role)",
        "admin-erin",
    )
    assert jot["definition_matches"] == "True"
    assert jot["approver"] == "test"
    assert jot["approved_definition_hash"] == jot["current_definition_hash"] != ""
    review = next(row for row in rows if row["role"] == "review")
    assert (review["grant_scope"], review["grant_role"]) == ("server", "review")


def test_the_json_holds_the_whole_explanation_and_can_include_what_is_refused(world):
    document = json.loads(run("--team", "alpha", "--format", "json", "--include-unavailable"))

    assert document["team"] == "alpha"
    refused = {
        (entry["role"], entry["name"]): entry["first_failing_rule"]
        for entry in document["entries"]
        if not entry["in_catalogue"]
    }
    assert refused[("review", "files__write_file")] == "tool_approval"
    assert refused[("operations", "files__read_file")] == "grant"
    assert refused[("review", "notes__jot")] == "role_class"
    assert all(entry["team"] == "alpha" for entry in document["entries"])


def test_a_role_filter_and_bad_input(world):
    rows = list(csv.DictReader(StringIO(run("--team", "alpha", "--role", "review"))))
    assert {row["role"] for row in rows} == {"review"}

    with pytest.raises(CommandError, match="No team 'nope'"):
        run("--team", "nope")
    with pytest.raises(CommandError, match="alpha has no role 'boss'"):
        run("--team", "alpha", "--role", "boss")
