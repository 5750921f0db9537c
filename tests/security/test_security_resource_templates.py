"""Issue 26, Low 3: a URI read through a resource template must be an expansion of it per RFC 6570;
`{id}` matched `../../etc/passwd`. A simple expansion never spans `/`; neither does any other
expression but the reserved (`+`) and fragment (`#`) ones; and a URI with a dot-segment the
template does not have (also percent-encoded) is not the template's.

The examples are RFC 6570's own (section 3.2) where they apply, then the review's attack through a
real gateway to a real server.
"""

from __future__ import annotations

import anyio
import pytest
from mcp import MCPError

from registry.catalogue.uri_templates import template_matches, template_pattern
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import RunningGateway, discovered_http_server, gateway_client
from tests.mcp_fixtures import start_http_scenario


def matches(template: str, uri: str) -> bool:
    return template_matches(template, template_pattern(template), uri)


@pytest.mark.parametrize(
    ("template", "uri"),
    [
        # RFC 6570, 3.2.2 to 3.2.9 (var = "value", hello = "Hello World!", path = "/foo/bar",
        # list = ("red", "green", "blue"), keys = (semi ";", dot ".", comma ",")).
        ("{var}", "value"),
        ("{hello}", "Hello%20World%21"),
        ("{half}", "50%25"),
        ("O{empty}X", "OX"),
        ("{x,y}", "1024,768"),
        ("{list}", "red,green,blue"),
        ("{keys*}", "semi=%3B,dot=.,comma=%2C"),
        ("{+var}", "value"),
        ("{+path}/here", "/foo/bar/here"),
        ("here?ref={+path}", "here?ref=/foo/bar"),
        ("{#var}", "#value"),
        ("{#hello}", "#Hello%20World!"),
        ("X{.var}", "X.value"),
        ("X{.list*}", "X.red.green.blue"),
        ("{/var}", "/value"),
        ("{/var,x}/here", "/value/1024/here"),
        ("{/list*}", "/red/green/blue"),
        ("{;x,y}", ";x=1024;y=768"),
        ("{;x,y,empty}", ";x=1024;y=768;empty"),
        ("{?x,y}", "?x=1024&y=768"),
        ("{?x,y,empty}", "?x=1024&y=768&empty="),
        ("?fixed=yes{&x}", "?fixed=yes&x=1024"),
        # The gateway's own example: the scenario server's notes.
        ("memo://notes/{id}", "memo://notes/42"),
        ("file:///{+path}", "file:///docs/guide.md"),
    ],
)
def test_an_expansion_matches_its_template(template, uri):
    assert matches(template, uri)


@pytest.mark.parametrize(
    ("template", "uri"),
    [
        ("memo://notes/{id}", "memo://notes/../../etc/passwd"),  # the review's
        ("memo://notes/{id}", "memo://notes/42/more"),
        ("memo://notes/{id}", "memo://notes/.."),
        ("memo://notes/{id}", "memo://notes/%2e%2e"),
        ("memo://notes/{id}", "memo://notes/..%2F..%2Fetc%2Fpasswd"),  # decodes to a traversal
        ("memo://notes/{id}.txt", "memo://notes/a/b.txt"),
        ("memo://notes/{id}", "memo://notes/a?b"),
        ("memo://notes/{id}", "memo://notes/50%"),  # not percent-encoding
        ("X{.var}", "X.a/b"),
        ("{/var}", "/a/b"),  # one variable, one segment
        ("{?x}", "?x=a/b"),
        ("file:///{+path}", "file:///docs/../../etc/passwd"),
        ("file:///{+path}", "file:///docs/%2E%2E/secret"),
    ],
)
def test_what_is_no_expansion_of_the_template_does_not_match(template, uri):
    assert not matches(template, uri)


def test_a_template_with_dot_segments_of_its_own_keeps_them():
    assert matches("file:///srv/../shared/{name}", "file:///srv/../shared/readme")


def test_a_very_long_uri_is_not_matched():
    assert not matches("memo://notes/{id}", "memo://notes/" + "a" * 10_000)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
def test_the_gateway_reads_nothing_outside_the_template():
    gateway = RunningGateway()
    upstream = start_http_scenario("--templates", "--name", "notes-server")
    try:
        server = discovered_http_server("notes", upstream.url)
        team = TeamFactory(slug="alpha")
        GrantFactory(team=team, server=server)
        token = AgentTokenFactory(team=team).plain

        async def run():
            async with gateway_client(gateway.url, token) as client:
                inside = await client.read_resource("toolroom://notes/memo%3A%2F%2Fnotes%2F42")
                refused = []
                for upstream_uri in ("..%2F..%2Fetc%2Fpasswd", "42%2Fmore", "%2E%2E"):
                    with pytest.raises(MCPError) as caught:
                        await client.read_resource(
                            f"toolroom://notes/memo%3A%2F%2Fnotes%2F{upstream_uri}"
                        )
                    refused.append(caught.value.message)
                return inside, refused

        inside, refused = anyio.run(run)
    finally:
        upstream.stop()
        gateway.stop()

    assert inside.contents[0].text == "note 42 of notes-server"
    assert len(refused) == 3
    assert all(message.startswith("No resource 'toolroom://notes/") for message in refused)
