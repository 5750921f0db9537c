"""What a real SDK server asks of the caller on one upstream session (sampling, roots) reaches the
caller of the call it belongs to, and nobody else: over stdio, where nothing says which call a
request belongs to, a request made while two calls (or a tool call and a resource read) are in
flight is refused, and the callers' askers are never called.

No database: the adapter takes plain targets and returns plain dicts."""

from __future__ import annotations

import json

import anyio
import pytest

from tests.mcp_fixtures import SAMPLING_SERVER, scenario_argv
from workers.adapters.mcp_client import Deadlines, StdioTarget, connect

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

QUICK = Deadlines(connect=15, call=10)
TARGET = StdioTarget(scenario_argv(script=SAMPLING_SERVER))


def _asker(name, asked):
    async def ask(method, params):
        asked.append((name, method))
        if method == "roots/list":
            return {"roots": [{"uri": f"file:///home/{name}"}]}
        return {"role": "assistant", "content": {"type": "text", "text": name}, "model": name}

    return ask


def _text(result):
    return "".join(part.get("text", "") for part in result["content"])


async def test_the_one_call_in_flight_is_asked_for_its_roots_and_a_completion():
    asked: list[tuple[str, str]] = []
    async with connect(TARGET, deadlines=QUICK, mode="legacy") as session:
        roots = await session.call_tool("where", {}, asker=_asker("ada", asked))
        said = await session.call_tool("summarize", {"text": "x"}, asker=_asker("ada", asked))
        refused = await session.call_tool("where", {})  # a caller that cannot be asked

    assert json.loads(_text(roots)) == ["file:///home/ada"]
    assert _text(said) == "ada: ada"
    assert asked == [("ada", "roots/list"), ("ada", "sampling/createMessage")]
    assert refused["isError"] is True
    assert "The caller cannot answer roots/list requests mid-call." in _text(refused)


async def test_with_two_calls_in_flight_no_caller_gets_the_request():
    asked: list[tuple[str, str]] = []
    async with connect(TARGET, deadlines=QUICK, mode="legacy") as session:
        results = {}

        async def hold():
            results["hold"] = await session.call_tool(
                "hold", {"seconds": 2}, asker=_asker("bob", asked)
            )

        async with anyio.create_task_group() as group:
            group.start_soon(hold)
            await anyio.sleep(0.5)  # bob's call is in flight on the session
            results["where"] = await session.call_tool("where", {}, asker=_asker("ada", asked))
            # A read in flight counts too: bob's call is not taken to be the one asked.
            results["read"] = await session.read_resource("roots://mine")

    assert asked == []
    assert results["where"]["isError"] is True
    assert "cannot tell which of its callers this roots/list request is for (2 calls" in _text(
        results["where"]
    )
    assert _text(results["hold"]) == "held"
    read = results["read"]["contents"][0]["text"]
    assert read.startswith("no roots:")
    assert "(2 calls in flight on this session)" in read
