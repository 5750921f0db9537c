"""Quotas at the gateway, the data-plane half: open handshake sessions, calls a minute and calls
in flight, per team and per caller (an agent token, or a person), counted across every gateway
process in Redis (one Lua script per check: atomic), or in this process without Redis.

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import MCPError
from redis.exceptions import RedisError

from registry.gateway.port import (
    QUOTA_EXCEEDED,
    CallDecision,
    Caller,
    CallOutcome,
    QuotaLimits,
    quota_hit_audit,
    quota_key_prefix,
    quota_redis_url,
    quota_refusal_message,
    quota_subject,
    team_quota_limits,
)
from workers.gateway.outcomes import ERROR_META, GatewayResult, error_result
from workers.gateway.registry_calls import cached_or_in_thread, in_thread

logger = logging.getLogger(__name__)

LEASE_SECONDS = 60.0
REFRESH_SECONDS = 20.0
WINDOW_SECONDS = 60
AUDIT_EVERY_SECONDS = 60
SESSION_RETRY_AFTER = 30
FLUSH_SECONDS = 0.05
RELEASED_MAX = 100_000
HITS_FIELD = "gateway-quota:hits"
# How long a session's lease stays findable by another replica (a DELETE there gives it back);
# after that, the lease ends with the holder's copy of the session (its idle timeout).
SESSION_LEASE_RECORD_SECONDS = 24 * 3600
# While Redis does not answer, quotas are not counted; the log says so at most this often.
STORE_WARNING_SECONDS = 10.0
# The JSON-RPC error code of a refusal for a quota (implementation-defined server error range).
QUOTA_ERROR_CODE = -32029

# KEYS: caller leases, team leases, caller counter, team counter, hits hash.
# ARGV: now, lease expiry, member, the four limits (0: none), counter ttl, retry-after of the
# counters, team id, audit-once key prefix, the four limits' names.
# ARGV[16...]: pairs of (sorted set, member) this process released since its last script, removed
# first (releases ride along with the next check; a flusher sends the rest within FLUSH_SECONDS).
# Returns {0} when admitted (the leases taken, the counters counted), else {i, audit}: the i-th
# limit refused (nothing taken), audit 1 when this caller's hit of it is the first in a minute.
ACQUIRE_LUA = """
for j = 16, #ARGV, 2 do
  redis.call('ZREM', ARGV[j], ARGV[j + 1])
end
local now = tonumber(ARGV[1])
for i = 1, 4 do
  local limit = tonumber(ARGV[3 + i])
  if limit > 0 then
    local used
    if i <= 2 then
      redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
      used = redis.call('ZCARD', KEYS[i])
    else
      used = tonumber(redis.call('GET', KEYS[i]) or '0')
    end
    if used >= limit then
      local name = ARGV[11 + i]
      redis.call('HINCRBY', KEYS[5], ARGV[10] .. '|' .. name, 1)
      local first = redis.call('SET', ARGV[11] .. name, '1', 'NX', 'EX', 60)
      return {i, first and 1 or 0}
    end
  end
end
for i = 1, 4 do
  if tonumber(ARGV[3 + i]) > 0 then
    if i <= 2 then
      redis.call('ZADD', KEYS[i], ARGV[2], ARGV[3])
      redis.call('EXPIRE', KEYS[i], ARGV[8])
    elseif redis.call('INCR', KEYS[i]) == 1 then
      redis.call('EXPIRE', KEYS[i], ARGV[8])
    end
  end
end
return {0, 0}
"""


class QuotaRefused(Exception):
    """A limit was reached: which one, its value, and when to try again (seconds)."""

    def __init__(self, *, limit: str, value: int, retry_after: int) -> None:
        self.limit = limit
        self.value = value
        self.retry_after = retry_after
        super().__init__(quota_refusal_message(limit, value, retry_after))

    @property
    def message(self) -> str:
        return str(self)


def quota_decision(
    identity: Caller, name: str, version: int | None, error: QuotaRefused
) -> CallDecision:
    """The refusal of a call for a quota, as the audit records it."""
    return CallDecision(
        allowed=False,
        code=QUOTA_EXCEEDED,
        reasons=(error.message,),
        name=name,
        team_id=identity.team_id,
        role_id=identity.role_id,
        version=version,
    )


def quota_result(decision: CallDecision, error: QuotaRefused) -> GatewayResult:
    """The refused call's result; its error meta names the limit and when to try again."""
    result = error_result(code=QUOTA_EXCEEDED, message=error.message)
    result["_meta"][ERROR_META].update({"limit": error.limit, "retryAfter": error.retry_after})
    return GatewayResult(
        result=result, outcome=CallOutcome.REFUSED, code=QUOTA_EXCEEDED, decision=decision
    )


def quota_mcp_error(result: GatewayResult) -> MCPError:
    """The MCP error a call refused for a quota answers with: it names the limit."""
    meta = result.result["_meta"][ERROR_META]
    return MCPError(
        QUOTA_ERROR_CODE,
        f"Toolroom: {meta['message']}",
        {"limit": meta.get("limit", ""), "retryAfter": meta.get("retryAfter", 1)},
    )


@dataclass(frozen=True)
class Lease:
    """A session or a call in flight, counted in these sorted sets under this member."""

    member: str
    keys: tuple[str, ...]


def _queue_removals(pipe: Any, leases: list[Lease]) -> None:
    """Queue the removal of leases from their sorted sets on a Redis pipeline, for the releases
    no check carried: batched (`flush`) or at once (a session's, `_give_back_session`)."""
    for lease in leases:
        for key in lease.keys:
            pipe.zrem(key, lease.member)


class _Memory:
    """The same counts in this process (no Redis: one gateway process)."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, float]] = {}
        self.counters: dict[str, tuple[float, int]] = {}
        self.audited: dict[str, float] = {}

    def acquire(self, keys: list[str], args: list[Any]) -> tuple[int, int]:
        now, expiry, member = float(args[0]), float(args[1]), str(args[2])
        limits = [int(value) for value in args[3:7]]
        for i in range(4):
            if limits[i] <= 0:
                continue
            if i < 2:
                held = self.leases.setdefault(keys[i], {})
                for gone in [m for m, until in held.items() if until <= now]:
                    del held[gone]
                used = len(held)
            else:
                until, used = self.counters.get(keys[i], (0.0, 0))
                used = used if until > now else 0
            if used >= limits[i]:
                audit_key = f"{args[10]}{args[11 + i]}"
                first = self.audited.get(audit_key, 0.0) <= now
                if first:
                    self.audited[audit_key] = now + AUDIT_EVERY_SECONDS
                return i + 1, int(first)
        for i in range(4):
            if limits[i] <= 0:
                continue
            if i < 2:
                self.leases.setdefault(keys[i], {})[member] = expiry
            else:
                until, used = self.counters.get(keys[i], (0.0, 0))
                if until <= now:
                    until, used = now + float(args[7]), 0
                self.counters[keys[i]] = (until, used + 1)
        return 0, 0

    def release(self, lease: Lease) -> None:
        for key in lease.keys:
            self.leases.get(key, {}).pop(lease.member, None)

    def renew(self, leases: list[Lease], expiry: float) -> None:
        for lease in leases:
            for key in lease.keys:
                held = self.leases.get(key, {})
                if lease.member in held:
                    held[lease.member] = expiry


class Quotas:
    """The quota checks of one gateway process (in Redis when the cache is Redis)."""

    def __init__(self, *, redis_url: str | None = None) -> None:
        url = quota_redis_url() if redis_url is None else redis_url
        self.prefix = quota_key_prefix()
        self.redis: Any = None
        self.memory = _Memory()  # used without Redis
        if url:
            import redis.asyncio  # noqa: PLC0415

            # Checks wait for a free connection rather than failing at redis-py's default cap
            # of 100 connections, which 100 sessions calling at once reach.
            pool = redis.asyncio.BlockingConnectionPool.from_url(
                url, max_connections=512, timeout=2.0, socket_timeout=2.0
            )
            self.redis = redis.asyncio.Redis.from_pool(pool)
            self.script: Any = self.redis.register_script(ACQUIRE_LUA)
        self.held: dict[str, Lease] = {}  # this process's leases, renewed while held
        self.released: list[Lease] = []  # given back, not yet removed in Redis
        self.wake: anyio.Event | None = None  # set while the flusher runs
        self.flushed: anyio.Event | None = None  # a batch of releases on its way
        self.sessions: dict[str, Lease] = {}  # MCP session id -> its lease
        self.store_warned_at = -STORE_WARNING_SECONDS

    async def limits(self, identity: Caller, version: int | None) -> QuotaLimits:
        limits: QuotaLimits = await cached_or_in_thread(
            team_quota_limits, team_id=identity.team_id, version=version
        )
        return limits

    async def _acquire(
        self, identity: Caller, *, kind: str, names: tuple[str, str, str, str], values: list[int]
    ) -> Lease | None:
        now = time.time()
        subject = quota_subject(identity)
        team = f"team:{identity.team_id}"
        minute = int(now // WINDOW_SECONDS)
        keys = [
            f"{self.prefix}:{kind}:{subject}",
            f"{self.prefix}:{kind}:{team}",
            f"{self.prefix}:rate:{subject}:{minute}",
            f"{self.prefix}:rate:{team}:{minute}",
            f"{self.prefix}:{HITS_FIELD}",
        ]
        member = uuid.uuid4().hex
        window_left = max(1, math.ceil((minute + 1) * WINDOW_SECONDS - now))
        args: list[Any] = [
            f"{now:.6f}",
            f"{now + LEASE_SECONDS:.6f}",
            member,
            *values,
            WINDOW_SECONDS * 2 if kind == "calls" else int(LEASE_SECONDS) * 2,
            window_left,
            identity.team_id,
            f"{self.prefix}:audited:{subject}:",
            *names,
        ]
        if self.redis is not None:
            if self.flushed is not None:
                await self.flushed.wait()
            carried, self.released = self.released, []
            for gone in carried:
                for key in gone.keys:
                    args += [key, gone.member]
            try:
                refused, audit = (int(x) for x in await self.script(keys=keys, args=args))
            except (RedisError, OSError) as exc:
                # Redis is away: serve without counting (the process's session cap still holds)
                # rather than refuse every call; said once in a while, not per call.
                self._requeue(carried)
                self._store_away(exc)
                return None
            except BaseException:
                self._requeue(carried)
                raise
        else:
            refused, audit = self.memory.acquire(keys, args)
        if refused:
            limit = names[refused - 1]
            retry = window_left if refused > 2 else (1 if kind == "calls" else SESSION_RETRY_AFTER)
            error = QuotaRefused(limit=limit, value=values[refused - 1], retry_after=retry)
            if audit:
                await self._audit(identity, error, "a session" if kind == "sessions" else "a call")
            raise error
        lease = Lease(member, (keys[0], keys[1]))
        self.held[member] = lease
        return lease

    def _store_away(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self.store_warned_at >= STORE_WARNING_SECONDS:
            self.store_warned_at = now
            logger.warning("quotas not counted while Redis does not answer (%s)", exc)

    async def _audit(self, identity: Caller, error: QuotaRefused, what: str) -> None:
        try:
            await in_thread(
                quota_hit_audit,
                identity=identity,
                limit=error.limit,
                value=error.value,
                what=what,
                retry_after=error.retry_after,
            )
        except Exception:
            logger.exception("could not audit the quota hit of team %s", identity.team_id)

    async def release(self, lease: Lease) -> None:
        """Give a lease back, whatever ended the call or session (cancellation included). With
        Redis it rides along with this process's next check, or goes with the flusher's next
        batch (within FLUSH_SECONDS); without a flusher running, at once (shielded)."""
        self.held.pop(lease.member, None)
        if self.redis is None:
            self.memory.release(lease)
            return
        self.released.append(lease)
        if self.wake is not None:
            self.wake.set()
            return
        with anyio.CancelScope(shield=True):
            await self.flush()

    def _requeue(self, leases: list[Lease]) -> None:
        if len(self.released) < RELEASED_MAX:  # else they lapse within LEASE_SECONDS
            self.released[:0] = leases

    async def flush(self) -> None:
        """Send the releases no check has carried yet, in one pipeline."""
        batch, self.released = self.released, []
        if not batch:
            return
        self.flushed = done = anyio.Event()  # a check waits for it: it must see these gone
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                _queue_removals(pipe, batch)
                await pipe.execute()
        except Exception:
            logger.exception("could not release %d quota leases (retried)", len(batch))
            self._requeue(batch)
        finally:
            done.set()
            if self.flushed is done:
                self.flushed = None

    @contextlib.asynccontextmanager
    async def call(self, identity: Caller, version: int | None) -> AsyncIterator[None]:
        """Hold a call's place for as long as the call runs; QuotaRefused when a limit is hit."""
        limits = await self.limits(identity, version)
        if not limits.limits_calls:
            yield
            return
        lease = await self._acquire(
            identity,
            kind="calls",
            names=(
                "concurrent_calls_per_caller",
                "concurrent_calls_per_team",
                "calls_per_minute_per_caller",
                "calls_per_minute_per_team",
            ),
            values=[
                limits.concurrent_calls_per_caller,
                limits.concurrent_calls_per_team,
                limits.calls_per_minute_per_caller,
                limits.calls_per_minute_per_team,
            ],
        )
        if lease is None:  # not counted: Redis is away
            yield
            return
        try:
            yield
        finally:
            await self.release(lease)

    async def session_open(self, identity: Caller, version: int | None) -> Lease | None:
        """Count a handshake session about to open (None: no session limit); QuotaRefused."""
        limits = await self.limits(identity, version)
        if not limits.limits_sessions:
            return None
        return await self._acquire(
            identity,
            kind="sessions",
            names=("sessions_per_caller", "sessions_per_team", "", ""),
            values=[limits.sessions_per_caller, limits.sessions_per_team, 0, 0],
        )

    def _session_key(self, session_id: str) -> str:
        return f"{self.prefix}:session-lease:{session_id}"

    async def session_opened(self, lease: Lease, session_id: str) -> None:
        """The session holds this lease; with Redis, any replica that ends the session (a
        client's DELETE) can give it back (`session_ended`)."""
        self.sessions[session_id] = lease
        if self.redis is None:
            return
        try:
            await self.redis.set(
                self._session_key(session_id),
                json.dumps([lease.member, *lease.keys]),
                ex=SESSION_LEASE_RECORD_SECONDS,
            )
        except Exception as exc:  # best effort: the lease still ends with its holder's session
            logger.warning("could not record session %s's lease: %s", session_id[:12], exc)

    async def session_closed(self, session_id: str) -> None:
        """The session ended in this process (DELETE, idle timeout, crash): its lease, if here."""
        lease = self.sessions.pop(session_id, None)
        if lease is not None:
            await self._give_back_session(session_id, lease)

    async def session_ended(self, session_id: str) -> None:
        """A client ended the session (DELETE) on this replica: its lease is given back whichever
        replica holds it (that replica's renewals never add a released lease again)."""
        lease = self.sessions.pop(session_id, None)
        if lease is None and self.redis is not None:  # held by another replica, if by any
            try:
                raw = await self.redis.getdel(self._session_key(session_id))
            except Exception as exc:  # the holder gives it back when its copy of the session ends
                logger.warning("could not find session %s's lease: %s", session_id[:12], exc)
                return
            if raw is not None:
                member, *keys = json.loads(raw)
                lease = Lease(member, tuple(keys))
        if lease is not None:
            await self._give_back_session(session_id, lease)

    async def _give_back_session(self, session_id: str, lease: Lease) -> None:
        """At once, not batched with calls' releases: the client may open its next session now."""
        self.held.pop(lease.member, None)
        if self.redis is None:
            self.memory.release(lease)
            return
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                _queue_removals(pipe, [lease])
                pipe.delete(self._session_key(session_id))
                await pipe.execute()
        except Exception as exc:  # the lease lapses within LEASE_SECONDS unrenewed
            logger.warning("could not give back session %s's lease: %s", session_id[:12], exc)

    async def renew(self) -> None:
        """Renew every lease this process holds (the sessions it serves, the calls in flight)."""
        leases = list(self.held.values())
        if not leases:
            return
        expiry = time.time() + LEASE_SECONDS
        if self.redis is None:
            self.memory.renew(leases, expiry)
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for lease in leases:
                for key in lease.keys:
                    pipe.zadd(key, {lease.member: expiry}, xx=True)
                    pipe.expire(key, int(LEASE_SECONDS) * 2)
            await pipe.execute()

    async def run(self) -> None:
        """Until cancelled: renew this process's leases every REFRESH_SECONDS, and send the
        releases no check carried within FLUSH_SECONDS of the first of them."""

        async def renewing() -> None:
            while True:
                await anyio.sleep(REFRESH_SECONDS)
                try:
                    await self.renew()
                except Exception:
                    logger.exception("could not renew the quota leases")

        async def flushing() -> None:
            while True:
                self.wake = anyio.Event()
                if not self.released:
                    await self.wake.wait()
                await anyio.sleep(FLUSH_SECONDS)
                with anyio.CancelScope(shield=True):
                    await self.flush()

        if self.redis is None:
            await renewing()
            return
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(renewing)
                group.start_soon(flushing)
        finally:
            self.wake = None

    async def close(self) -> None:
        self.wake = None
        for lease in list(self.held.values()):
            await self.release(lease)
        if self.redis is not None:
            with anyio.CancelScope(shield=True):
                await self.flush()
                await self.redis.aclose()
