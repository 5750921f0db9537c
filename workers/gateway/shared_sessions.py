"""Handshake sessions (2025-11-25 and older, `Mcp-Session-Id`) that any gateway replica serves:
the SDK's session manager, with each session's record kept in Redis (docs/gateway.md, "Sessions
across replicas").

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any
from uuid import uuid4

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared._stream_protocols import WriteStream
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    ErrorData,
    InitializeRequestParams,
    JSONRPCError,
    jsonrpc_message_adapter,
)
from redis import asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from workers.gateway.session_relay import (
    REPLICA,
    Relay,
    RelayedWrites,
    answer_owner,
    answer_request,
    buffered_body,
)

logger = logging.getLogger(__name__)

STORE_ERRORS: tuple[type[Exception], ...] = (RedisError, OSError)
KEY_INFIX = "gateway-session:"
REDIS_CONNECTIONS = 512  # per process


@dataclass(frozen=True)
class SessionRecord:
    """What a replica needs to serve a session it did not open."""

    owner: dict[str, Any] | None  # the SDK's AuthorizationContext of the opening request
    protocol_version: str
    client_params: dict[str, Any] | None  # the InitializeRequestParams, by alias
    # The level its client set with `logging/setLevel`: kept beside the record (`<record>:log`,
    # which `touch` reads with it), not in it, so that setting it rewrites nothing else.
    log_level: str | None = None

    def dumps(self) -> str:
        return json.dumps(
            {"o": self.owner, "v": self.protocol_version, "c": self.client_params},
            separators=(",", ":"),
        )

    @classmethod
    def loads(cls, raw: bytes | str) -> SessionRecord:
        data = json.loads(raw)
        return cls(owner=data["o"], protocol_version=str(data["v"]), client_params=data["c"])


class StoreUnavailable(RedisError):
    """The store failed moments ago: not asked again until its retry time (a circuit)."""


class SessionStore:
    """Session records in Redis, one key per session with a time-to-live. Short timeouts, no
    retries, and a circuit: after a failure the store is not asked for `retry_seconds` (like the
    catalogue's cache, registry/core/cache.py), so a Redis that is down costs one timeout."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        ttl_seconds: float,
        timeout: float,
        retry_seconds: float = 5.0,
    ) -> None:
        self.prefix = f"{prefix}:{KEY_INFIX}"
        self.url = url
        self.timeout = timeout
        self.ttl = max(1, math.ceil(ttl_seconds))
        self.retry_seconds = retry_seconds
        self.open_until = 0.0  # monotonic; the circuit is open before it
        # A request waits for a free connection (up to the timeout) rather than failing at
        # redis-py's default cap of 100 connections, which 100 busy sessions reach.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=REDIS_CONNECTIONS,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=AsyncRetry(NoBackoff(), 0),
        )
        self.client = aioredis.Redis.from_pool(pool)

    @contextlib.asynccontextmanager
    async def _guarded(self) -> AsyncIterator[None]:
        if time.monotonic() < self.open_until:
            raise StoreUnavailable("the session store failed moments ago")
        try:
            yield
        except STORE_ERRORS:
            self.open_until = time.monotonic() + self.retry_seconds
            raise

    def key(self, session_id: str) -> str:
        return self.prefix + session_id

    async def save(self, session_id: str, record: SessionRecord) -> None:
        async with self._guarded():
            await self.client.set(self.key(session_id), record.dumps(), ex=self.ttl)

    def keys(self, session_id: str) -> list[str]:
        """The record's key and those kept beside it: what its client was told, where its GET
        stream is open (session_relay.py), the log level its client set, and the marker a
        DELETE leaves (the session ended, not lost with Redis's data)."""
        key = self.key(session_id)
        return [key, key + ":told", key + ":stream", key + ":log", key + ":ended"]

    async def touch(self, session_id: str) -> tuple[SessionRecord | None, bool]:
        """The session's record (with its log level; None: no record) and whether a DELETE
        ended it, their time-to-live renewed (one round trip)."""
        keys = self.keys(session_id)
        async with self._guarded(), self.client.pipeline(transaction=False) as pipe:
            pipe.get(keys[0])
            pipe.get(keys[3])
            pipe.exists(keys[4])
            for key in keys:
                pipe.expire(key, self.ttl)
            raw, level, ended, *_ = await pipe.execute()
        if raw is None:
            return None, bool(ended)
        record = SessionRecord.loads(raw)
        if level is not None:
            record = replace(record, log_level=level.decode())
        return record, bool(ended)

    async def set_log_level(self, session_id: str, level: str) -> None:
        """The level the session's client set (`logging/setLevel`), for every replica."""
        async with self._guarded():
            await self.client.set(self.keys(session_id)[3], level, ex=self.ttl)

    def told_key(self, session_id: str) -> str:
        return self.key(session_id) + ":told"

    async def told(self, session_id: str) -> int | None:
        """The team catalogue version the session's client last listed or was told of."""
        async with self._guarded():
            raw = await self.client.get(self.told_key(session_id))
        return int(raw) if raw is not None else None

    async def tell(self, session_id: str, version: int) -> None:
        async with self._guarded():
            await self.client.set(self.told_key(session_id), str(version), ex=self.ttl)

    async def renew(self, session_ids: list[str]) -> None:
        """Renew the records of these sessions (never recreating one that ended)."""
        if not session_ids:
            return
        async with self._guarded(), self.client.pipeline(transaction=False) as pipe:
            for session_id in session_ids:
                for key in self.keys(session_id):
                    pipe.expire(key, self.ttl)
            await pipe.execute()

    async def delete(self, session_id: str) -> None:
        """The session's keys removed, and the marker that it ended left for the replicas that
        still hold it (renewed with its keys while one does)."""
        keys = self.keys(session_id)
        async with self._guarded(), self.client.pipeline(transaction=False) as pipe:
            pipe.delete(*keys[:-1])
            pipe.set(keys[-1], "1", ex=self.ttl)
            await pipe.execute()

    def relay(self) -> Relay:
        """This replica's channel to the others (session_relay.py), on the same Redis."""
        return Relay(
            self.client, prefix=self.prefix, url=self.url, timeout=self.timeout, ttl=self.ttl
        )

    async def close(self) -> None:
        await self.client.aclose()


def store_from_settings() -> SessionStore | None:
    """The store on the default cache's Redis (under its key prefix); None without Redis (one
    gateway process, sessions in memory: `make run` without REDIS_URL)."""
    from django.conf import settings  # noqa: PLC0415 (workers import settings lazily)

    params = settings.CACHES["default"]
    if not str(params.get("BACKEND", "")).endswith("RedisCache"):
        return None
    location = params["LOCATION"]
    return SessionStore(
        location if isinstance(location, str) else location[0],
        prefix=str(params.get("KEY_PREFIX", "") or "toolroom"),
        ttl_seconds=float(settings.TOOLROOM_GATEWAY_IDLE_SECONDS),
        # At least a second: the wait is measured in the event loop, which a busy process
        # delays; a store taken for down would cost every session held elsewhere a 404.
        timeout=max(float(settings.TOOLROOM_CACHE_TIMEOUT_SECONDS), 1.0),
        retry_seconds=float(settings.TOOLROOM_CACHE_RETRY_SECONDS),
    )


def _error_response(message: str, status_code: int, code: int = INVALID_REQUEST) -> Response:
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message))
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=status_code,
        media_type="application/json",
    )


def _header(scope: Scope, name: str) -> str | None:
    raw = name.lower().encode("latin-1")
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == raw), None)


def _owner(scope: Scope) -> dict[str, Any] | None:
    user = scope.get("user")
    return dict(authorization_context(user)) if isinstance(user, AuthenticatedUser) else None


class SharedSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager whose handshake sessions any replica restores from the store.
    Without a store it is the SDK's manager unchanged."""

    def __init__(self, *args: Any, store: SessionStore | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.store = store
        self.connections: dict[str, Connection] = {}
        # Sessions opened here while the store could not record them: recorded when it can.
        self.unrecorded: set[str] = set()
        # Run while a session's GET stream is open in this process (session id, the GET's
        # scope, the session's connection); ended when the stream ends.
        self.stream_watch: Callable[[str, Scope, Connection], Awaitable[None]] | None = None
        # Told the log level a session's record holds, before the request is served here.
        self.log_level_seen: Callable[[str, str], None] | None = None
        # What replicas pass each other (questions to the GET stream, answers to the asker).
        self.relay = store.relay() if store is not None else None
        self.writers: dict[str, WriteStream[SessionMessage]] = {}  # the transports' own
        if self.relay is not None:
            self.relay.on_question = self._question_here
            self.relay.on_answer = self._answer_here

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with super().run(), anyio.create_task_group() as group:
            if self.store is not None and self.session_idle_timeout is not None:
                group.start_soon(self._renew_held, self.store, self.session_idle_timeout / 3)
            if self.relay is not None and self.store is not None:
                group.start_soon(self.relay.listen, group, self.store.retry_seconds)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
                if self.store is not None:
                    with anyio.CancelScope(shield=True):
                        await self.store.close()

    async def _renew_held(self, store: SessionStore, every: float) -> None:
        while True:
            await anyio.sleep(every)
            try:
                await store.renew(list(self._server_instances))
            except STORE_ERRORS as exc:
                logger.warning("could not renew the gateway's session records: %s", exc)

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = _header(scope, MCP_SESSION_ID_HEADER)
        if session_id is None:
            await super()._handle_stateful_request(scope, receive, send)
            return
        store = self.store
        record: SessionRecord | None = None
        ended = False
        if store is not None:
            try:
                record, ended = await store.touch(session_id)
            except STORE_ERRORS as exc:  # serve what this process holds; restore nothing
                if not isinstance(exc, StoreUnavailable):
                    logger.warning("session store unreachable (%s): local sessions only", exc)
                store = None
        if store is not None and record is None and not ended:
            if session_id in self.unrecorded:
                record = await self._record_late(store, session_id)
            elif session_id in self.connections:  # held here, its record lost with Redis's data
                logger.warning("session %s had no record: written again", session_id[:12])
                record = await self._record_late(store, session_id)
        if store is not None:
            if record is None:  # ended on some replica, expired, or never issued
                transport = self._server_instances.get(session_id)
                if transport is not None:
                    await self._discard_session(session_id, transport)
                await _error_response("Session not found", 404)(scope, receive, send)
                return
            if session_id not in self._server_instances:
                refusal = await self._restore(session_id, record, scope)
                if refusal is not None:
                    await refusal(scope, receive, send)
                    return
            if record.log_level is not None and self.log_level_seen is not None:
                self.log_level_seen(session_id, record.log_level)
        relay = self.relay if store is not None else None
        if relay is not None and scope.get("method") == "POST":
            body, receive = await buffered_body(receive)
            asker = answer_owner(body)
            if asker is not None and asker != REPLICA:  # an answer to another replica's question
                if not self._opened_by_requestor(session_id, scope):  # as the SDK would answer
                    await _error_response("Session not found", 404)(scope, receive, send)
                    return
                await relay.to_asker(asker, session_id, body)
                await Response(status_code=202)(scope, receive, send)
                return
        connection = self.connections.get(session_id)
        if connection is not None:  # `notifications/initialized` may have reached another one
            connection.initialized.set()
        status: list[int] = []
        stream_open = anyio.Event()

        ending = scope.get("method") == "DELETE"

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
                if int(message["status"]) == 200:
                    stream_open.set()
                if ending and int(message["status"]) < 300:
                    # Before the client hears the session is gone: no replica serves it after,
                    # and what it held (its quota lease) is free for the client's next session.
                    await self._ended(store, session_id)
            await send(message)

        hook = self.stream_watch
        if scope.get("method") == "GET" and connection is not None and (hook or relay):
            # The session's GET stream is open here: what the session is told while it lasts
            # (list_changed) is sent from this process, and other replicas send theirs here.
            opened: list[bool] = []
            async with anyio.create_task_group() as group:

                async def watching() -> None:
                    await stream_open.wait()
                    if relay is not None:
                        opened.append(True)
                        await relay.stream_opened(session_id)
                    if hook is not None:
                        await hook(session_id, scope, connection)

                group.start_soon(watching)
                try:
                    await super()._handle_stateful_request(scope, receive, watch)
                finally:
                    group.cancel_scope.cancel()
                    if relay is not None and opened:
                        with anyio.CancelScope(shield=True):
                            await relay.stream_closed(session_id)
            return
        await super()._handle_stateful_request(scope, receive, watch)

    async def _ended(self, store: SessionStore | None, session_id: str) -> None:
        if store is not None:
            try:
                await store.delete(session_id)
            except STORE_ERRORS as exc:
                logger.warning("could not remove the record of ended session: %s", exc)
        await self.session_ended(session_id)

    async def session_ended(self, session_id: str) -> None:
        """A client ended the session here (DELETE); a subclass may act on it (quotas)."""

    async def _record_late(self, store: SessionStore, session_id: str) -> SessionRecord | None:
        """The record of a session opened here while the store was down, written now."""
        connection = self.connections.get(session_id)
        owner = self._session_owners.get(session_id)
        if connection is None:
            return None
        params = connection.client_params
        record = SessionRecord(
            owner=dict(owner) if owner is not None else None,
            protocol_version=connection.protocol_version,
            client_params=params.model_dump(by_alias=True, mode="json", exclude_none=True)
            if params is not None
            else None,
        )
        try:
            await store.save(session_id, record)
        except STORE_ERRORS:
            return None
        self.unrecorded.discard(session_id)
        return record

    def _opened_by_requestor(self, session_id: str, scope: Scope) -> bool:
        """Whether this request's principal opened the session (held here by now): checked
        before an answer is passed on, since the SDK's own check comes after."""
        user = scope.get("user")
        requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
        return session_id in self._server_instances and requestor == self._session_owners.get(
            session_id
        )

    async def _restore(
        self, session_id: str, record: SessionRecord, scope: Scope
    ) -> Response | None:
        """Hold the recorded session here; the response to send instead when it cannot be."""
        user = scope.get("user")
        requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
        owner = dict(requestor) if requestor is not None else None
        if owner != record.owner:
            logger.warning("refusing session %s: not the principal that opened it", session_id[:12])
            return _error_response("Session not found", 404)
        async with self._session_creation_lock:
            if session_id in self._server_instances:  # restored meanwhile by another request
                return None
            if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
                return _error_response("Too many open sessions", 503, INTERNAL_ERROR)
            transport = self._new_transport(session_id)
            if requestor is not None:
                self._session_owners[session_id] = requestor
            self._server_instances[session_id] = transport
            await self._group().start(self._run_session, transport, record)
        logger.info("restored session %s from the session store", session_id[:12])
        return None

    def _group(self) -> TaskGroup:
        group: TaskGroup | None = self._task_group
        if group is None:
            raise RuntimeError("The session manager is not running.")
        return group

    def _new_transport(self, session_id: str) -> StreamableHTTPServerTransport:
        return StreamableHTTPServerTransport(
            mcp_session_id=session_id,
            is_json_response_enabled=self.json_response,
            event_store=self.event_store,
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )

    async def _run_session(
        self,
        transport: StreamableHTTPServerTransport,
        record: SessionRecord | None,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """The session's server task (the SDK's `serve_loop`, with the connection kept so its
        negotiated parameters can be recorded, or seeded from a record)."""
        session_id = transport.mcp_session_id
        assert session_id is not None  # noqa: S101 (stateful transports have one)
        async with transport.connect() as (read_stream, write_stream):
            writes: WriteStream[SessionMessage] = write_stream
            if self.relay is not None:  # its messages for a GET stream held elsewhere go there
                writes = RelayedWrites(write_stream, session_id, self.relay)
                self.writers[session_id] = write_stream
            dispatcher: JSONRPCDispatcher[TransportContext] = JSONRPCDispatcher(
                read_stream, writes, inline_methods=frozenset({"initialize"})
            )
            connection = Connection.for_loop(dispatcher, session_id=session_id)
            if record is not None:
                connection.protocol_version = record.protocol_version
                if record.client_params is not None:
                    connection.client_params = InitializeRequestParams.model_validate(
                        record.client_params
                    )
                connection.initialized.set()
            self.connections[session_id] = connection
            task_status.started()
            try:
                idle_scope = transport.idle_scope or anyio.CancelScope()
                with idle_scope:
                    await serve_connection(
                        self.app,
                        dispatcher,
                        connection=connection,
                        lifespan_state=self._lifespan_state,
                    )
                if idle_scope.cancelled_caught:
                    logger.info("session %s idle here", session_id[:12])
            except Exception:
                logger.exception("session %s crashed", session_id[:12])
            finally:
                self.connections.pop(session_id, None)
                self.writers.pop(session_id, None)
                self.unrecorded.discard(session_id)
                await self._discard_session(session_id, transport)

    async def _question_here(self, session_id: str, message: dict[str, Any]) -> None:
        """Another replica's message for this session's GET stream, held here."""
        writer = self.writers.get(session_id)
        if writer is None or self.relay is None or session_id not in self.relay.streams:
            logger.info("a message for session %s came after its stream left", session_id[:12])
            return
        parsed = jsonrpc_message_adapter.validate_python(message, by_name=False)
        await writer.send(SessionMessage(parsed))

    async def _answer_here(self, session_id: str, message: dict[str, Any]) -> None:
        """The client's answer to a question of this replica, posted to another: handed to
        the session's transport as if the client had posted it here."""
        transport = self._server_instances.get(session_id)
        if transport is None:
            logger.info("an answer for session %s came after it left", session_id[:12])
            return
        scope, receive = answer_request(session_id, json.dumps(message).encode())

        async def ignore(message: Message) -> None:
            return None

        await transport.handle_request(scope, receive, ignore)

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        transport = self._new_transport(uuid4().hex)
        assert transport.mcp_session_id is not None  # noqa: S101
        if requestor is not None:
            self._session_owners[transport.mcp_session_id] = requestor
        self._server_instances[transport.mcp_session_id] = transport
        return transport

    async def _serve_opening_request(
        self,
        http_transport: StreamableHTTPServerTransport,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """The SDK's, with the session's record written before the `initialize` answer leaves."""
        store = self.store
        session_id = http_transport.mcp_session_id
        assert session_id is not None  # noqa: S101
        status: list[int] = []

        async def record_then_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
                connection = self.connections.get(session_id)
                if int(message["status"]) < 400 and connection is not None and store is not None:
                    params = connection.client_params
                    record = SessionRecord(
                        owner=_owner(scope),
                        protocol_version=connection.protocol_version,
                        client_params=params.model_dump(
                            by_alias=True, mode="json", exclude_none=True
                        )
                        if params is not None
                        else None,
                    )
                    try:
                        await store.save(session_id, record)
                    except STORE_ERRORS as exc:
                        logger.warning("session %s held here only: %s", session_id[:12], exc)
                        self.unrecorded.add(session_id)
            await send(message)

        established = False
        try:
            await self._group().start(self._run_session, http_transport, None)
            await http_transport.handle_request(scope, receive, record_then_send)
            established = bool(status) and status[0] < 400
        finally:
            if not established:
                await self._discard_session(session_id, http_transport)
