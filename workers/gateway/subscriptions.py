"""`subscriptions/listen` at the gateway (2026-07-28 clients): a listening client is told when
its team's catalogue version moves, as handshake sessions get `notifications/tools/list_changed`.

More: docs/gateway.md, "Module notes"."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from django.core.exceptions import SynchronousOnlyOperation
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    ToolsListChanged,
    event_matches,
    event_to_notification,
)

from registry.gateway.port import caller_still_good, team_catalogue_version
from workers.gateway.auth import CallerPrincipal
from workers.gateway.registry_calls import cached_or_in_thread, in_thread

logger = logging.getLogger(__name__)

LISTEN_POLL_SECONDS = 1.0
MAX_STREAMS = 10_000
MAX_BUFFERED_EVENTS = 64
ENDED_BY_REVOKE = "The token is no longer valid; the subscription ended."
# What moves with a team's catalogue version: its tools, and the resources and prompts offered.
VERSION_EVENTS: tuple[ServerEvent, ...] = (
    ToolsListChanged(),
    PromptsListChanged(),
    ResourcesListChanged(),
)


@dataclass(eq=False)
class _Stream:
    token: str  # the bearer token that opened it, checked again when the version moves
    send: MemoryObjectSendStream[ServerEvent | str]


@dataclass
class _Team:
    streams: set[_Stream] = field(default_factory=set)
    watcher: asyncio.Task[None] | None = None


def _honored(requested: types.SubscriptionFilter) -> types.SubscriptionFilter:
    """What the gateway delivers of a request: the list-changed kinds (resource updates are
    not forwarded from upstream servers, so individual resource subscriptions are not honored)."""
    return types.SubscriptionFilter(
        tools_list_changed=True if requested.tools_list_changed else None,
        prompts_list_changed=True if requested.prompts_list_changed else None,
        resources_list_changed=True if requested.resources_list_changed else None,
    )


def _token_valid(plain: str) -> bool:
    return caller_still_good(plain=plain)


class TeamListen:
    """The `on_subscriptions_listen` handler of the gateway's SDK server."""

    def __init__(self, *, poll_seconds: float = LISTEN_POLL_SECONDS) -> None:
        self.poll_seconds = poll_seconds
        self.teams: dict[int, _Team] = {}
        self.count = 0

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen requires a request id")
        request = ctx.request
        user = request.scope.get("user") if request is not None else None
        if not isinstance(user, CallerPrincipal):  # RequireAuthMiddleware lets no one else in
            raise MCPError(types.INVALID_REQUEST, "Not authenticated.")
        if self.count >= MAX_STREAMS:
            raise MCPError(types.INTERNAL_ERROR, "Toolroom: too many open subscriptions.")
        honored = _honored(params.notifications)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        send, recv = anyio.create_memory_object_stream[ServerEvent | str](MAX_BUFFERED_EVENTS)
        stream = _Stream(token=user.access_token.token, send=send)
        team_id = user.caller.team_id
        # The version this stream starts from: a change after the acknowledgement is told.
        version = await cached_or_in_thread(team_catalogue_version, team_id=team_id)
        self._add(team_id, stream, version)
        try:
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(
                    params=types.SubscriptionsAcknowledgedNotificationParams(
                        notifications=honored, _meta=meta
                    )
                ),
                related_request_id=subscription_id,
            )
            async for event in recv:
                if isinstance(event, str):  # the watcher ended this stream
                    raise MCPError(types.INVALID_REQUEST, event)
                if event_matches(honored, frozenset(), event):
                    await ctx.session.send_notification(
                        event_to_notification(event, meta), related_request_id=subscription_id
                    )
        finally:
            self._remove(team_id, stream)
            send.close()
            recv.close()
        return types.SubscriptionsListenResult(_meta=meta)

    def _add(self, team_id: int, stream: _Stream, version: int) -> None:
        team = self.teams.setdefault(team_id, _Team())
        team.streams.add(stream)
        self.count += 1
        if team.watcher is None or team.watcher.done():
            team.watcher = asyncio.get_running_loop().create_task(
                self._watch(team_id, team, version), name=f"listen:team:{team_id}"
            )

    def _remove(self, team_id: int, stream: _Stream) -> None:
        team = self.teams.get(team_id)
        if team is None or stream not in team.streams:
            return
        team.streams.discard(stream)
        self.count -= 1
        if not team.streams:
            if team.watcher is not None:
                team.watcher.cancel()
            del self.teams[team_id]

    async def _watch(self, team_id: int, team: _Team, version: int) -> None:
        seen = version
        while team.streams:
            await asyncio.sleep(self.poll_seconds)
            try:
                current = await cached_or_in_thread(team_catalogue_version, team_id=team_id)
            except Exception:  # the cache or database is down: try again next tick
                logger.exception("listen: could not read the catalogue version of team %s", team_id)
                continue
            if current == seen:
                continue
            seen = current
            for stream in list(team.streams):
                await self._tell(stream)

    async def _tell(self, stream: _Stream) -> None:
        try:
            valid = _token_valid(stream.token)
        except SynchronousOnlyOperation:
            valid = await in_thread(_token_valid, plain=stream.token)
        events: tuple[ServerEvent | str, ...] = VERSION_EVENTS if valid else (ENDED_BY_REVOKE,)
        try:
            for event in events:
                stream.send.send_nowait(event)
        except anyio.WouldBlock:  # the client stopped reading: end its stream
            stream.send.close()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        if not valid:
            stream.send.close()
