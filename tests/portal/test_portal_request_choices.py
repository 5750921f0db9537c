"""Asking for access scales: the request form searches servers, tools and categories, lists the
tool that matched rather than its whole server, and leaves out what the team already holds."""

from __future__ import annotations

import re

import pytest

from registry.teams import services
from registry.teams.models import TeamRole
from tests.catalogue_helpers import READ, WRITE, approved_server, tool_of
from tests.factories import GrantFactory, TeamFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]
URL = "/portal/teams/alpha/requests/"


@pytest.fixture
def offer(dave):
    alpha = TeamFactory(slug="alpha", name="Alpha")
    services.team_member_set(actor="test", team=alpha, user=dave)
    files = approved_server("files", {"read_file": READ, "write_file": WRITE}, category="storage")
    clock = approved_server("clock", {"get_time": READ, "set_alarm": WRITE}, category="timekeeping")
    weather = approved_server("weather", {"forecast": READ})
    GrantFactory(team=alpha, server=files)  # the whole server, every role
    GrantFactory(team=alpha, server=clock, tool=tool_of(clock, "get_time"))
    return {"alpha": alpha, "files": files, "clock": clock, "weather": weather}


def _choices(page: str) -> list[str]:
    return re.findall(r'<option value="((?:server|tool):\d+)"', page)


def test_what_the_team_holds_is_not_offered(client, dave, offer):
    clock, files = offer["clock"], offer["files"]
    client.force_login(dave)

    choices = _choices(client.get(URL).content.decode())

    assert f"server:{files.pk}" not in choices
    assert f"tool:{tool_of(files, 'read_file').pk}" not in choices
    assert f"tool:{tool_of(clock, 'get_time').pk}" not in choices  # held as one tool
    assert f"tool:{tool_of(clock, 'set_alarm').pk}" in choices
    assert f"server:{clock.pk}" in choices  # the rest of clock may still be asked for
    assert f"server:{offer['weather'].pk}" in choices


def test_a_grant_for_one_role_leaves_the_choice_in(client, dave, offer):
    role = TeamRole.objects.filter(team=offer["alpha"]).first() or TeamRole.objects.create(
        team=offer["alpha"], name="review", permission_classes=["read"]
    )
    weather = offer["weather"]
    GrantFactory(team=offer["alpha"], server=weather, role=role)
    client.force_login(dave)

    assert f"server:{weather.pk}" in _choices(client.get(URL).content.decode())


def test_the_search_lists_the_tool_that_matched_not_its_whole_server(client, dave, offer):
    clock = offer["clock"]
    client.force_login(dave)

    by_tool = client.get(URL, {"find": "alarm"}).content.decode()
    by_category = client.get(URL, {"find": "timekeeping"}).content.decode()
    nothing = client.get(URL, {"find": "zzz"}).content.decode()

    assert _choices(by_tool) == [f"tool:{tool_of(clock, 'set_alarm').pk}"]
    assert "1 choice matches" in by_tool
    assert _choices(by_category) == [f"server:{clock.pk}", f"tool:{tool_of(clock, 'set_alarm').pk}"]
    assert _choices(nothing) == []
    assert "0 choices match" in nothing


def test_a_request_sent_from_a_search_is_accepted(client, dave, offer):
    clock = offer["clock"]
    client.force_login(dave)
    target = f"tool:{tool_of(clock, 'set_alarm').pk}"

    answer = client.post(f"{URL}?find=alarm", {"target": target, "justification": "Wake-up calls."})

    assert answer.status_code == 302


def test_browse_shows_the_tool_that_matched_and_asks_for_one_tool(client, dave, offer):
    clock = offer["clock"]
    set_alarm, get_time = tool_of(clock, "set_alarm"), tool_of(clock, "get_time")
    client.force_login(dave)

    page = client.get("/portal/browse/", {"q": "alarm", "team": "alpha"}).content.decode()

    matched, _, folded = page.partition('<details class="other-tools">')
    assert "set_alarm" in matched
    assert "get_time" not in matched  # folded under "1 other tool of ..."
    assert "1 other tool of" in folded
    assert "get_time" in folded
    assert f"/portal/teams/alpha/requests/?target=tool:{set_alarm.pk}" in page
    assert f"?target=tool:{get_time.pk}" not in page  # alpha holds it: "has it" instead
    form = client.get(URL, {"target": f"tool:{set_alarm.pk}"}).content.decode()
    assert f'<option value="tool:{set_alarm.pk}" selected>' in form
