"""`notifications/tools/list_changed` for handshake sessions, from whichever gateway replica holds
the session's GET stream (docs/gateway.md, "Change notifications").

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from mcp.server.connection import Connection

from registry.gateway.port import VersionedCache, team_catalogue_version
from workers.gateway.registry_calls import cached_or_in_thread
from workers.gateway.shared_sessions import STORE_ERRORS, SessionStore

logger = logging.getLogger(__name__)

WATCH_SECONDS = 1.0
_TOLD_MAX = 10_000
TOOLS_LIST_CHANGED = "notifications/tools/list_changed"


@dataclass(eq=False)
class _Stream:
    session_id: str
    connection: Connection
    told: int | None  # the version its client knows; None: it had not listed


@dataclass
class _Team:
    streams: set[_Stream] = field(default_factory=set)
    watcher: asyncio.Task[None] | None = None


class ListChanged:
    """What the handshake sessions' clients know, and the watch of their open GET streams."""

    def __init__(
        self, sessions: SessionStore | None, *, poll_seconds: float = WATCH_SECONDS
    ) -> None:
        self.sessions = sessions
        self.poll_seconds = poll_seconds
        self._told: VersionedCache[str, int] = VersionedCache("told versions", limit=_TOLD_MAX)
        self.teams: dict[int, _Team] = {}
        self.streams = 0  # GET streams watched in this process

    async def listed(self, session_id: str, version: int) -> None:
        """The session's client listed the tools at `version`."""
        self._told.put(session_id, version)
        if self.sessions is not None:
            try:
                await self.sessions.tell(session_id, version)
            except STORE_ERRORS as exc:
                logger.warning("could not record what session %s listed: %s", session_id[:12], exc)

    async def _known(self, session_id: str) -> int | None:
        if self.sessions is not None:
            with contextlib.suppress(*STORE_ERRORS):
                told = await self.sessions.told(session_id)
                if told is not None:
                    return told
        return self._told.get(session_id)

    async def watch(self, session_id: str, team_id: int, connection: Connection) -> None:
        """Watch the session's stream with its team until cancelled (the stream ended)."""
        stream = _Stream(session_id, connection, await self._known(session_id))
        team = self.teams.setdefault(team_id, _Team())
        team.streams.add(stream)
        self.streams += 1
        try:
            if team.watcher is None or team.watcher.done():
                team.watcher = asyncio.get_running_loop().create_task(
                    self._watch_team(team_id, team), name=f"list-changed:team:{team_id}"
                )
            # A change made while the stream was away (or before it opened) is told at once.
            current = await cached_or_in_thread(team_catalogue_version, team_id=team_id)
            await self._tell(stream, current)
            await asyncio.Event().wait()  # until the stream ends and this task is cancelled
        finally:
            team.streams.discard(stream)
            self.streams -= 1
            if not team.streams:
                if team.watcher is not None:
                    team.watcher.cancel()
                self.teams.pop(team_id, None)

    async def _watch_team(self, team_id: int, team: _Team) -> None:
        seen: int | None = None
        while team.streams:
            await asyncio.sleep(self.poll_seconds)
            try:
                current = await cached_or_in_thread(team_catalogue_version, team_id=team_id)
            except Exception:  # the cache or database is down: try again next tick
                logger.exception("list_changed: could not read the version of team %s", team_id)
                continue
            if current == seen:
                continue
            seen = current
            for stream in list(team.streams):
                await self._tell(stream, current)

    async def _tell(self, stream: _Stream, current: int) -> None:
        if stream.told is None:  # it may have listed since, on any replica
            stream.told = await self._known(stream.session_id)
            if stream.told is None:
                return
        if stream.told == current:
            return
        await stream.connection.notify(TOOLS_LIST_CHANGED, None)
        stream.told = current
        self._told.put(stream.session_id, current)
        if self.sessions is not None:
            with contextlib.suppress(*STORE_ERRORS):
                await self.sessions.tell(stream.session_id, current)
