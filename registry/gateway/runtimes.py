"""Where the gateway finds a stdio or sandboxed server: which runtime worker holds it, at which
private address, and how it asks for one that is not running to be started (on demand).

More: docs/gateway.md, "Module notes"."""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from registry.core import task_queue
from registry.core.cache import CACHE_ERRORS, hot_cache
from registry.servers.gateway_policy import ServerGatewayPolicy
from registry.servers.models import RuntimeState, ServerStatus

ENDPOINT_TTL_SECONDS = 60
DEMAND_WRITE_SECONDS = 30.0
_demand_written: dict[int, float] = {}


def _endpoint_key(owner: str) -> str:
    return f"runtime-endpoint:{owner}"


def runtime_endpoint_secret() -> bytes:
    """The shared secret of runtime endpoints, derived from SECRET_KEY (both sides have it)."""
    return hmac.new(
        settings.SECRET_KEY.encode(), b"toolroom runtime endpoint", hashlib.sha256
    ).digest()


def runtime_endpoint_advertise(*, owner: str, address: str) -> None:
    """A runtime worker says where its private endpoint listens (host:port)."""
    hot_cache().set(_endpoint_key(owner), address, ENDPOINT_TTL_SECONDS)


class RuntimeAddressUnavailable(Exception):
    """Where a runtime worker listens could not be read: the cache did not answer."""


def runtime_endpoint_address(*, owner: str) -> str | None:
    try:
        value = hot_cache().get(_endpoint_key(owner))
    except CACHE_ERRORS as exc:
        raise RuntimeAddressUnavailable(
            "where the server's runtime worker listens could not be read: the cache (Redis) "
            f"failed ({type(exc).__name__})"
        ) from exc
    return str(value) if value else None


@dataclass(frozen=True)
class RuntimeLocation:
    owner: str
    state: str
    address: str | None

    @property
    def running(self) -> bool:
        return self.state == RuntimeState.RUNNING and bool(self.owner) and bool(self.address)

    @property
    def reachable(self) -> bool:
        """A runtime worker holds the server (running, or claimed and starting) and listens:
        a call may go to it now (it waits there for what the server still needs)."""
        return (
            self.state in (RuntimeState.RUNNING, RuntimeState.STARTING)
            and bool(self.owner)
            and bool(self.address)
        )


def server_runtime_location(*, server_id: int) -> RuntimeLocation:
    """Who holds the server's runtime and at which address (one query)."""
    row = (
        ServerStatus.objects.filter(server_id=server_id)
        .values_list("runtime_owner", "runtime_state")
        .first()
    )
    owner, state = row if row else ("", RuntimeState.STOPPED)
    address = runtime_endpoint_address(owner=owner) if owner else None
    return RuntimeLocation(owner=owner, state=state, address=address)


def server_runtime_demand(*, server_id: int, idle_stop_seconds: int, start: bool) -> None:
    """Record that a call wants the server warm; `start` also asks a runtime worker to start it
    (once, no retries: the call is waiting; BrokerUnavailable if the broker does not take it).

    The write is throttled per server and process: demand lasts `idle_stop_seconds`, far longer
    than the throttle.
    """
    now = time.monotonic()
    if start or now - _demand_written.get(server_id, 0.0) >= DEMAND_WRITE_SECONDS:
        _demand_written[server_id] = now
        until = timezone.now() + timedelta(seconds=max(idle_stop_seconds, DEMAND_WRITE_SECONDS))
        updated = ServerGatewayPolicy.objects.filter(server_id=server_id).update(
            demanded_until=until
        )
        if not updated:
            ServerGatewayPolicy.objects.get_or_create(
                server_id=server_id, defaults={"demanded_until": until}
            )
    if start:
        task_queue.send_now(
            task_queue.RUNTIME_COMMAND,
            args=(server_id, "start"),
            queue=task_queue.RUNTIME_QUEUE,
            expires=60,
            retry=False,
        )
