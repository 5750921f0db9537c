"""What a handshake session's replicas pass each other through Redis: the server's requests to
the client (a question mid-call, `elicitation/create`) to the replica holding the session's GET
stream, and the client's answers to the replica whose call asked (docs/gateway.md, "Sessions
across replicas").

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self
from uuid import uuid4

import anyio
from anyio.abc import TaskGroup
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared._stream_protocols import WriteStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import JSONRPCNotification, JSONRPCRequest
from redis import asyncio as aioredis
from redis.exceptions import RedisError
from starlette.types import Message, Receive, Scope

logger = logging.getLogger(__name__)

REPLICA = uuid4().hex[:16]  # this gateway process
ASK_PREFIX = "toolroom-ask-"
STREAM_WAIT_SECONDS = 2.0
_POLL_SECONDS = 0.1
_RELAY_ERRORS: tuple[type[Exception], ...] = (RedisError, OSError)
_asked = itertools.count(1)

# What the replica does with what another sent it: (session id, the JSON-RPC message).
Deliver = Callable[[str, dict[str, Any]], Awaitable[None]]


def ask_id() -> str:
    """The id of a question the gateway asks a handshake client: it names this replica."""
    return f"{ASK_PREFIX}{REPLICA}-{next(_asked)}"


def answer_owner(body: bytes) -> str | None:
    """The replica that asked the question this POST body answers; None: not such an answer."""
    if ASK_PREFIX.encode() not in body:  # the cheap test: every other POST stops here
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or "method" in message:
        return None
    request_id = message.get("id")
    if not isinstance(request_id, str) or not request_id.startswith(ASK_PREFIX):
        return None
    replica, _, _ = request_id.removeprefix(ASK_PREFIX).partition("-")
    return replica or None


async def buffered_body(receive: Receive) -> tuple[bytes, Receive]:
    """A request's whole body, and a `receive` that hands it out again, then the original's."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def answer_request(session_id: str, body: bytes) -> tuple[Scope, Receive]:
    """The POST of a client's answer another replica passed here, as if posted here (the
    session's transport takes it as the client's)."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "server": ("127.0.0.1", 0),
        "client": ("127.0.0.1", 0),
        "headers": [
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (MCP_SESSION_ID_HEADER.encode(), session_id.encode()),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    given = False

    async def receive() -> Message:
        nonlocal given
        if given:
            await anyio.sleep_forever()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return scope, receive


def for_get_stream(item: SessionMessage) -> bool:
    """A message the transport sends on the session's GET stream: a request or notification
    of the server's own, not scoped to a client request."""
    if not isinstance(item.message, JSONRPCRequest | JSONRPCNotification):
        return False
    metadata = item.metadata
    return not (
        isinstance(metadata, ServerMessageMetadata) and metadata.related_request_id is not None
    )


class Relay:
    """This replica's channel: who holds which session's GET stream, and what replicas pass."""

    def __init__(self, client: Any, *, prefix: str, url: str, timeout: float, ttl: int) -> None:
        self.client = client  # the session store's Redis client (short timeouts, no retries)
        self.prefix = prefix  # the session records' key prefix
        self.url = url
        self.timeout = timeout
        self.ttl = ttl
        self.streams: set[str] = set()  # sessions whose GET stream is open in this process
        self.counts = {"questions": 0, "answers": 0}  # passed to another replica
        self.on_question: Deliver | None = None
        self.on_answer: Deliver | None = None
        # Per session, the end of the delivery of its latest message: each message waits for
        # the one before of its session, so a call's log messages reach the GET stream in the
        # order the server sent them (sessions do not wait for each other).
        self.delivered: dict[str, anyio.Event] = {}

    def channel(self, replica: str) -> str:
        return f"{self.prefix}replica:{replica}"

    def stream_key(self, session_id: str) -> str:
        return f"{self.prefix}{session_id}:stream"

    async def stream_opened(self, session_id: str) -> None:
        self.streams.add(session_id)
        try:
            await self.client.set(self.stream_key(session_id), REPLICA, ex=self.ttl)
        except _RELAY_ERRORS as exc:
            logger.warning("could not record where session %s listens: %s", session_id[:12], exc)

    async def stream_closed(self, session_id: str) -> None:
        self.streams.discard(session_id)
        script = "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end"
        with contextlib.suppress(*_RELAY_ERRORS):
            await self.client.eval(script, 1, self.stream_key(session_id), REPLICA)

    async def _publish(self, replica: str, kind: str, session_id: str, message: Any) -> bool:
        payload = json.dumps({"k": kind, "s": session_id, "m": message}, separators=(",", ":"))
        try:
            return int(await self.client.publish(self.channel(replica), payload)) > 0
        except _RELAY_ERRORS as exc:
            logger.warning("could not pass a message to replica %s: %s", replica, exc)
            return False

    async def to_stream(self, session_id: str, item: SessionMessage) -> bool:
        """Send the message to the replica holding the session's GET stream; False: it is
        here, or nowhere (a request waits a moment for one to open)."""
        wait = STREAM_WAIT_SECONDS if isinstance(item.message, JSONRPCRequest) else 0.0
        deadline = time.monotonic() + wait
        message = item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
        while session_id not in self.streams:
            try:
                holder = await self.client.get(self.stream_key(session_id))
            except _RELAY_ERRORS:
                return False
            replica = holder.decode() if isinstance(holder, bytes) else holder
            if (
                replica
                and replica != REPLICA
                and await self._publish(replica, "q", session_id, message)
            ):
                self.counts["questions"] += 1
                return True
            if time.monotonic() >= deadline:
                return False
            await anyio.sleep(_POLL_SECONDS)
        return False

    async def to_asker(self, replica: str, session_id: str, body: bytes) -> bool:
        """Send the client's answer to the replica that asked."""
        try:
            message = json.loads(body)
        except ValueError:
            return False
        sent = await self._publish(replica, "a", session_id, message)
        if sent:
            self.counts["answers"] += 1
        else:
            logger.warning("an answer on session %s found no replica %s", session_id[:12], replica)
        return sent

    async def listen(self, group: TaskGroup, retry_seconds: float) -> None:
        """Receive what other replicas pass this one, until cancelled (reconnects after an
        outage)."""
        while True:
            client = aioredis.Redis.from_url(self.url, socket_connect_timeout=self.timeout)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel(REPLICA))
                    while True:
                        received = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=1.0
                        )
                        if received is not None:
                            self._deliver_in_order(group, received["data"])
            except _RELAY_ERRORS as exc:
                logger.warning("replica channel lost (%s); listening again shortly", exc)
            except Exception:  # never the end of the gateway: listen again
                logger.exception("replica channel failed; listening again shortly")
            finally:
                with anyio.CancelScope(shield=True):
                    await client.aclose()
            await anyio.sleep(retry_seconds)

    def _deliver_in_order(self, group: TaskGroup, data: bytes | str) -> None:
        try:
            payload = json.loads(data)
            session_id = str(payload["s"])
        except (ValueError, KeyError, TypeError):
            logger.warning("a message another replica passed is not one: %.80r", data)
            return
        previous = self.delivered.get(session_id)
        done = anyio.Event()
        self.delivered[session_id] = done
        group.start_soon(self._received, session_id, payload, previous, done)

    async def _received(
        self,
        session_id: str,
        payload: dict[str, Any],
        previous: anyio.Event | None,
        done: anyio.Event,
    ) -> None:
        try:
            if previous is not None:
                await previous.wait()
            deliver = self.on_question if payload.get("k") == "q" else self.on_answer
            if deliver is not None:
                await deliver(session_id, dict(payload["m"]))
        except Exception:
            logger.exception("could not deliver a message another replica passed")
        finally:
            done.set()
            if self.delivered.get(session_id) is done:
                del self.delivered[session_id]


class RelayedWrites:
    """A session transport's write stream whose messages for the GET stream go to the replica
    holding that stream when it is not open here."""

    def __init__(self, inner: WriteStream[SessionMessage], session_id: str, relay: Relay) -> None:
        self.inner = inner
        self.session_id = session_id
        self.relay = relay

    async def send(self, item: SessionMessage, /) -> None:
        if for_get_stream(item) and await self.relay.to_stream(self.session_id, item):
            return
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None
