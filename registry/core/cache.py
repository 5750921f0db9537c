"""The catalogue's cache as the rest of the code may use it: one client per process, short
timeouts, a circuit around it, and the epoch under which its entries may be trusted.

More: docs/catalogue.md, "Module notes"."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from registry.core.database_outage import (
    DATABASE_ERRORS,
    continuity_seconds,
    database_answered,
    database_away,
    database_circuit_open,
    database_trip,
)

logger = logging.getLogger(__name__)

# What a cache that is down, frozen or refusing writes raises (redis-py wraps socket errors, but a
# pickled value or a closed pool can surface as OSError).
CACHE_ERRORS: tuple[type[Exception], ...] = (RedisError, OSError)


@dataclass
class _ProcessCache:
    """This process's view of one cache configuration."""

    config: str
    identity: str  # sha256 of location and key prefix: the epoch row's name
    backend: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    epoch: int | None = None  # None: not validated (or no longer)
    run_id: str | None = None  # the Redis run id the epoch was confirmed for
    validated_at: float = 0.0  # monotonic
    serial: int = 0  # moves whenever the validation is dropped
    open_until: float = 0.0  # monotonic; the circuit is open before it
    trips: int = 0
    # During a database outage (registry.core.database_outage): the confirmed epoch is kept
    # (`outage`: since the first failed confirmation; `kept_at`: last kept), while allowed.
    outage: bool = False
    kept_at: float = 0.0
    retrying: bool = False
    # The raw redis-py client on the backend's pool: Django makes a new client object per
    # operation (about 0.1 ms of CPU each); the hot paths read through this one.
    raw_client: Any = None

    def invalidate(self, why: str) -> None:
        with self.lock:
            if self.epoch is not None:
                logger.warning("catalogue cache no longer trusted: %s", why)
            self.epoch = None
            self.serial += 1


_lock = threading.Lock()
_shared: _ProcessCache | None = None


def _parse_run_id(info: Any) -> str:
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("run_id:"):
            return line.partition(":")[2].strip()
    return ""


def _connection_options(process_cache: _ProcessCache) -> dict[str, Any]:
    """Pool options for the sync client: short timeouts, no retries, a run-id check on connect."""

    def on_connect(connection: Any) -> None:
        connection.on_connect()
        connection.send_command("INFO", "server")
        _connection_saw(process_cache, _parse_run_id(connection.read_response()))

    timeout = settings.TOOLROOM_CACHE_TIMEOUT_SECONDS
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        "redis_connect_func": on_connect,
    }


def async_connection_options() -> dict[str, Any]:
    """The same options for an asyncio client of the same Redis (the ASGI fast path)."""

    async def on_connect(connection: Any) -> None:
        await connection.on_connect()
        await connection.send_command("INFO", "server")
        _connection_saw(_current(), _parse_run_id(await connection.read_response()))

    timeout = settings.TOOLROOM_CACHE_TIMEOUT_SECONDS
    from redis.asyncio.retry import Retry as AsyncRetry  # noqa: PLC0415

    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": AsyncRetry(NoBackoff(), 0),
        "redis_connect_func": on_connect,
    }


def _connection_saw(process_cache: _ProcessCache, run_id: str) -> None:
    """A new connection reached a Redis with this run id; another one than the epoch was
    confirmed for means a restart (or another server): stop trusting until revalidated."""
    confirmed = process_cache.run_id
    if confirmed is not None and run_id != confirmed:
        process_cache.invalidate(f"the Redis server restarted (run id {run_id[:8]})")


def _current() -> _ProcessCache:
    global _shared  # noqa: PLW0603 (one per process, on purpose)
    config = repr(sorted(settings.CACHES["default"].items()))
    current = _shared
    if current is None or current.config != config:
        with _lock:
            current = _shared
            if current is None or current.config != config:
                params = settings.CACHES["default"]
                identity = hashlib.sha256(
                    f"{params.get('LOCATION', '')}|{params.get('KEY_PREFIX', '')}".encode()
                ).hexdigest()
                backend = caches.create_connection("default")
                current = _ProcessCache(config=config, identity=identity, backend=backend)
                if isinstance(backend, RedisCache):
                    # Before the first use: the client and its pool are made from these options.
                    own = cast(Any, backend)
                    ours = _connection_options(current)
                    own._options = {
                        **ours,
                        **own._options,
                        "redis_connect_func": ours["redis_connect_func"],
                    }
                _shared = current
    return current


def hot_cache() -> Any:
    """The process-wide backend for the `default` cache settings in force (raw: no circuit, no
    epoch; for entries nobody can be harmed by, like last-used moments)."""
    return _current().backend


def cache_trip(exc: BaseException, *, where: str) -> None:
    """Record a cache failure: the circuit opens and the epoch must be confirmed again."""
    process_cache = _current()
    with process_cache.lock:
        first = process_cache.open_until <= time.monotonic()
        process_cache.open_until = time.monotonic() + settings.TOOLROOM_CACHE_RETRY_SECONDS
        process_cache.trips += 1
        process_cache.epoch = None
        process_cache.serial += 1
    if first:
        logger.warning(
            "catalogue cache unavailable (%s): %s; answering from the database", where, exc
        )


def cache_degraded() -> bool:
    """Whether the circuit is open: the catalogue answers from the database only."""
    return _current().open_until > time.monotonic()


def _server_run_id(backend: Any) -> str | None:
    if not isinstance(backend, RedisCache):
        return None
    client = cast(Any, backend)._cache.get_client(None, write=True)
    return str(client.info("server")["run_id"])


def _keep_through_outage(process_cache: _ProcessCache, run_id: str | None, started: float) -> None:
    """The database did not confirm the epoch: keep the last confirmed one while the rules of
    registry.core.database_outage allow it, else stop trusting the cache."""
    now = time.monotonic()
    window = float(settings.TOOLROOM_DATABASE_OUTAGE_SECONDS)
    with process_cache.lock:
        if process_cache.epoch is None:
            return
        why = ""
        if run_id is not None and run_id != process_cache.run_id:
            why = "Redis restarted during the database outage"
        elif not process_cache.outage and (
            started - process_cache.validated_at > continuity_seconds()
        ):
            why = "the epoch was not confirmed right up to the database outage"
        elif now - process_cache.validated_at > window:
            why = f"the database has been away longer than {window:g} s"
        if why:
            process_cache.epoch = None
            process_cache.serial += 1
            process_cache.outage = False
        else:
            if not process_cache.outage:
                logger.warning(
                    "the database is away: serving the state confirmed %.1f s ago for at most %g s",
                    now - process_cache.validated_at,
                    window,
                )
            process_cache.outage = True
            process_cache.kept_at = now
            return
    logger.warning("catalogue cache no longer trusted: %s", why)


def _retry_in_background(process_cache: _ProcessCache) -> None:
    """Try the database again off the request's path (one attempt at a time)."""
    with process_cache.lock:
        if process_cache.retrying:
            return
        process_cache.retrying = True

    def attempt() -> None:
        from django.db import connection  # noqa: PLC0415

        try:
            _revalidate(process_cache, background=True)
        except Exception:
            logger.exception("confirming the cache epoch failed")
        finally:
            process_cache.retrying = False
            connection.close()

    threading.Thread(target=attempt, name="epoch-retry", daemon=True).start()


def _revalidate(process_cache: _ProcessCache, *, background: bool = False) -> None:
    from django.db.models import F  # noqa: PLC0415

    from registry.core.models import CatalogueCacheEpoch  # noqa: PLC0415

    serial = process_cache.serial
    started = time.monotonic()
    try:
        run_id = _server_run_id(process_cache.backend)
    except CACHE_ERRORS as exc:
        cache_trip(exc, where="revalidation")
        return
    if not background and (process_cache.outage or database_circuit_open()):
        # Serving the last confirmed state: the request does not wait for the database.
        _keep_through_outage(process_cache, run_id, started)
        if process_cache.outage and not database_circuit_open():
            _retry_in_background(process_cache)
        return
    try:
        row, _ = CatalogueCacheEpoch.objects.get_or_create(cache=process_cache.identity)
        if run_id is not None and row.server_run_id != run_id:
            # A Redis we have not confirmed (first use, or it restarted and may hold an old
            # snapshot): whatever it holds under the current epoch is not to be trusted.
            CatalogueCacheEpoch.objects.filter(pk=row.pk, epoch=row.epoch).update(
                epoch=F("epoch") + 1,
                server_run_id=run_id,
                reason=f"new Redis run id {run_id[:8]}",
            )
            row.refresh_from_db()
    except DATABASE_ERRORS as exc:
        if not database_away(exc):
            raise
        database_trip(exc)
        _keep_through_outage(process_cache, run_id, started)
        return
    database_answered()
    with process_cache.lock:
        if process_cache.serial != serial:
            return  # dropped again meanwhile: the next caller revalidates
        process_cache.epoch = row.epoch
        process_cache.run_id = run_id
        process_cache.validated_at = time.monotonic()
        process_cache.outage = False


@dataclass(frozen=True)
class CatalogueCache:
    """A handle on the cache under a confirmed epoch. Every operation swallows cache failures
    (the circuit opens, a read answers None, a write answers False); `intact()` says whether
    reads made through it can still be trusted."""

    backend: Any
    epoch: int
    serial: int
    process_cache: _ProcessCache

    def key(self, name: str) -> str:
        """The epoch-scoped key for an entry the database can move past."""
        return f"{name}@{self.epoch}"

    def intact(self) -> bool:
        """No restart seen and no failure since the handle was made."""
        current = self.process_cache
        return current.serial == self.serial and current.epoch == self.epoch

    def usable(self) -> bool:
        """The circuit is closed: a failure since the handle was made means no more round trips
        (each would cost another timeout)."""
        return self.process_cache.open_until <= time.monotonic()

    def redis(self, key: str) -> Any | None:
        """The raw redis-py client for `key` (scripts, plain values), or None without Redis."""
        if not isinstance(self.backend, RedisCache):
            return None
        client = self.process_cache.raw_client
        if client is None:  # one per process cache; thread-safe, on the backend's own pool
            own = cast(Any, self.backend)
            client = own._cache.get_client(None, write=True)
            self.process_cache.raw_client = client
        return client

    def raw_key(self, key: str) -> str:
        return str(self.backend.make_and_validate_key(key))

    def get(self, key: str) -> Any:
        if not self.usable():
            return None
        try:
            return self.backend.get(key)
        except CACHE_ERRORS as exc:
            cache_trip(exc, where="get")
            return None

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        if not self.usable():
            return {}
        try:
            return dict(self.backend.get_many(keys))
        except CACHE_ERRORS as exc:
            cache_trip(exc, where="get_many")
            return {}

    def set(self, key: str, value: Any, timeout: float | None) -> bool:
        if not self.usable():
            return False
        try:
            self.backend.set(key, value, timeout)
        except CACHE_ERRORS as exc:
            cache_trip(exc, where="set")
            return False
        return True

    def add(self, key: str, value: Any, timeout: float | None) -> bool | None:
        """True if added, False if present, None if the cache failed."""
        if not self.usable():
            return None
        try:
            return bool(self.backend.add(key, value, timeout))
        except CACHE_ERRORS as exc:
            cache_trip(exc, where="add")
            return None

    def delete_many(self, keys: list[str]) -> bool:
        if not self.usable():
            return False
        try:
            self.backend.delete_many(keys)
        except CACHE_ERRORS as exc:
            cache_trip(exc, where="delete")
            return False
        return True


def catalogue_cache() -> CatalogueCache | None:
    """The cache under a confirmed epoch, or None while it is unavailable (degraded mode).

    Confirms the epoch (one query and one Redis round trip) when it is older than
    TOOLROOM_CACHE_REVALIDATE_SECONDS or was dropped.
    """
    process_cache = _current()
    if process_cache.open_until > time.monotonic():
        return None
    last = max(process_cache.validated_at, process_cache.kept_at)
    due = time.monotonic() - last >= settings.TOOLROOM_CACHE_REVALIDATE_SECONDS
    if process_cache.epoch is None or due:
        _revalidate(process_cache)
    with process_cache.lock:
        epoch, serial = process_cache.epoch, process_cache.serial
    if epoch is None:
        return None
    return CatalogueCache(
        backend=process_cache.backend, epoch=epoch, serial=serial, process_cache=process_cache
    )


def catalogue_cache_confirmed() -> CatalogueCache | None:
    """Like `catalogue_cache()` but never touching the database: None unless the epoch was
    confirmed recently. For the ASGI fast path, which leaves everything else to Django."""
    process_cache = _current()
    now = time.monotonic()
    with process_cache.lock:
        epoch, serial = process_cache.epoch, process_cache.serial
        fresh = now - process_cache.validated_at < settings.TOOLROOM_CACHE_REVALIDATE_SECONDS
    if epoch is None or not fresh or process_cache.open_until > now or process_cache.outage:
        return None  # (during a database outage Django answers, marking what it serves)
    return CatalogueCache(
        backend=process_cache.backend, epoch=epoch, serial=serial, process_cache=process_cache
    )


_keeper: threading.Thread | None = None


def start_epoch_keeper() -> None:
    """In a serving process (web, gateway): confirm the epoch every revalidation interval in a
    thread of its own, so that an idle process has a recent confirmation when the database goes
    away (the last confirmed state may be served only by a process that confirmed it right up to
    the outage: registry.core.database_outage)."""
    global _keeper  # noqa: PLW0603 (one per process, on purpose)
    if not settings.TOOLROOM_EPOCH_KEEPER or (_keeper is not None and _keeper.is_alive()):
        return

    def keep() -> None:
        from django.db import connection  # noqa: PLC0415

        while True:
            time.sleep(max(0.2, float(settings.TOOLROOM_CACHE_REVALIDATE_SECONDS)))
            try:
                catalogue_cache()
            except Exception:  # never let the keeper die; requests confirm too
                logger.debug("the epoch keeper could not confirm the epoch", exc_info=True)
            finally:
                connection.close()

    _keeper = threading.Thread(target=keep, name="epoch-keeper", daemon=True)
    _keeper.start()


def cache_epoch_bump(*, reason: str) -> None:
    """Move the epoch in the database (inside the caller's transaction, with the change the cache
    did not take): every entry cached under the old epoch becomes unreachable for every process
    once it revalidates, and at once for this one."""
    from django.db.models import F  # noqa: PLC0415

    from registry.core.models import CatalogueCacheEpoch  # noqa: PLC0415

    process_cache = _current()
    logger.warning("catalogue cache epoch moved: %s", reason)
    row, _ = CatalogueCacheEpoch.objects.get_or_create(cache=process_cache.identity)
    CatalogueCacheEpoch.objects.filter(pk=row.pk).update(epoch=F("epoch") + 1, reason=reason[:200])
    process_cache.invalidate(reason)


def database_degraded() -> bool:
    """Whether this process serves the last confirmed state while the database is away."""
    process_cache = _current()
    return process_cache.outage and process_cache.epoch is not None


def degraded_marker() -> str | None:
    """`X-Toolroom-Degraded`'s value for an answer now: `database`, `cache` or none. With the
    database away the answer is the last confirmed state whatever the cache's circuit says, so
    `database` wins when both are degraded (a loaded Redis can open the circuit mid-outage)."""
    if database_degraded():
        return "database"
    if cache_degraded():
        return "cache"
    return None


def cache_status() -> Mapping[str, Any]:
    """What readiness reports about the cache from this process's point of view."""
    process_cache = _current()
    return {
        "degraded": process_cache.open_until > time.monotonic(),
        "epoch": process_cache.epoch,
        "trips": process_cache.trips,
    }
