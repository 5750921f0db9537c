"""The gateway's link to a runtime worker delivers a call's log messages and progress reports to
the caller in the order the server sent them, and all of them before the call's answer: on a
2026-07-28 request's own stream anything after the answer is lost.

The real endpoint (`RuntimeEndpoint`) and the real link (`RuntimeLink`) over a real socket; the
server behind the endpoint is a handler that logs and reports at once and then answers, and the
caller's side is a recorder that is slow to take each message, as a caller's stream under load is.
That slowness is what a real runtime worker and SDK client show only now and then (the race that
made `tests/gateway/test_gateway_runtime_logging.py` fail one CI run in several)."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from workers.adapters.mcp_client import CallLog
from workers.gateway.runtime_link import RuntimeLink
from workers.runtime_endpoint import RuntimeEndpoint, call_log, call_progress


async def _chatty_handler(request: dict[str, Any], ask: Any) -> dict[str, Any]:
    sink = call_log.get()
    report = call_progress.get()
    assert sink is not None
    assert report is not None
    for step in range(3):
        await sink.send("warning", f"log {step}", None)
        await report(float(step + 1), 3.0, None)
    return {"content": [], "isError": False}


async def _call_through_link() -> tuple[list[str], list[str]]:
    secret = secrets.token_bytes(16)
    endpoint = RuntimeEndpoint(host="127.0.0.1", port=0, secret=secret, handle=_chatty_handler)
    address = await endpoint.start()
    link = RuntimeLink(address, secret)
    heard: list[str] = []
    before_answer: list[str] = []

    async def slow_log(level: str, data: Any, logger_name: str | None) -> None:
        await asyncio.sleep(0.05)  # a caller's stream that takes its time
        heard.append(f"log:{data}")

    async def slow_progress(progress: float, total: float | None, message: str | None) -> None:
        await asyncio.sleep(0.03)
        heard.append(f"progress:{progress:g}")

    try:
        await link.call(
            {"tool": "chatty", "arguments": {}},
            progress=slow_progress,
            log=CallLog("info", slow_log),
        )
        before_answer = list(heard)
        await asyncio.sleep(0.5)  # anything still on its way arrives now, after the answer
    finally:
        await link.close()
        await endpoint.close()
    return before_answer, heard


def test_notifications_reach_the_caller_in_order_and_before_the_answer():
    before_answer, heard = asyncio.run(_call_through_link())

    expected = [
        "log:log 0",
        "progress:1",
        "log:log 1",
        "progress:2",
        "log:log 2",
        "progress:3",
    ]
    assert before_answer == expected
    assert heard == expected
