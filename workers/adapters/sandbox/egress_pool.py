"""Proxied networks kept across a server's sessions: the internal network and its egress proxy.

More: docs/sandbox.md, "Module notes".
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import docker.errors

from workers.adapters.sandbox import networks
from workers.adapters.sandbox.engine import Engine, connect_engine, container_attach_socket
from workers.adapters.sandbox.errors import SandboxError
from workers.adapters.sandbox.images.base import BASE_IMAGE
from workers.adapters.sandbox.spec import (
    NOBODY,
    ContainerSpec,
    hardened_host_config,
    resource_labels,
)
from workers.adapters.sandbox.streams import (
    STDERR,
    STDOUT,
    FrameDemuxer,
    LineSplitter,
    StderrTail,
    StreamProtocolError,
)

logger = logging.getLogger(__name__)

LABEL_EGRESS_POLICY = "io.toolroom.egress-policy"
ROLE_HOLDER = "netns-holder"
# The holder of a kept network's namespace: it only waits for its stdin to close.
HOLDER_COMMAND = ["python3", "-I", "-c", "import sys; sys.stdin.buffer.read()"]
HOLDER_MEMORY_MB = 32
HOLDER_CPUS = 0.1
HOLDER_PIDS = 8
IDLE_SECONDS = 300.0
REMOVE_TIMEOUT = 10.0


def egress_policy(allowlist: Iterable[str]) -> str:
    """A short hash of an egress allowlist (order and case do not matter): the pool's key."""
    canonical = json.dumps(sorted({entry.strip().lower() for entry in allowlist}))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(eq=False)
class StandingEgress:
    """One kept network and its proxy; `users` sessions of this process are on it."""

    key: tuple[str, str, str, str]  # engine, owner, server, policy
    server_key: str
    policy: str
    session_id: str
    network_name: str
    proxy_name: str
    holder_name: str
    network_id: str = ""
    proxy_id: str = ""
    holder_id: str = ""
    users: int = 0
    idle_since: float = 0.0
    retired: bool = False  # superseded by another policy, or being removed: never handed out
    dead: bool = False  # the proxy is gone (or never came up)
    failure: str = ""
    network_made: threading.Event = field(default_factory=threading.Event)
    # The first session's server has started (or will not): the proxy and holder start then.
    first_server_went: threading.Event = field(default_factory=threading.Event)
    created: threading.Event = field(default_factory=threading.Event)  # the holder runs
    # `make` has nothing more under way (its last step, the holder's start, is done or failed)
    settled: threading.Event = field(default_factory=threading.Event)
    # A session other than the first wants the holder, or the first one ended: it starts.
    holder_wanted: threading.Event = field(default_factory=threading.Event)
    making: bool = False
    ready: threading.Event = field(default_factory=threading.Event)  # the proxy listens
    log: deque[str] = field(default_factory=lambda: deque(maxlen=50))
    listeners: list[deque[str]] = field(default_factory=list)
    sock: socket.socket | None = None  # the proxy's attach connection (its stdin)
    holder_sock: socket.socket | None = None  # the holder's

    @property
    def usable(self) -> bool:
        return not (self.retired or self.dead)


@dataclass
class EgressLease:
    """A session's use of a standing network; `fresh` when this session made it."""

    entry: StandingEgress
    fresh: bool

    @property
    def network_id(self) -> str:
        return self.entry.network_id

    @property
    def network_mode(self) -> str:
        """The server's network. The session that makes the network (`fresh`) is on it itself:
        its start does not wait for the holder's. Later ones join the holder's namespace, named
        by the holder's name (the engine looks it up when the server starts)."""
        if self.fresh:
            return self.entry.network_name
        return f"container:{self.entry.holder_name}"


class EgressPool:
    """This process's standing proxied networks (see the module's docstring)."""

    def __init__(self, *, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str, str, str], StandingEgress] = {}
        self._reaper: threading.Thread | None = None
        self._reaper_wake = threading.Event()

    def entries(self) -> list[StandingEgress]:
        with self._lock:
            return list(self._entries.values())

    # --- a session's use ------------------------------------------------------------------------

    def lease(self, engine: Engine, spec: ContainerSpec) -> EgressLease:
        """The standing network for `spec`'s server and policy, or a fresh one to make.

        A fresh lease's caller must then `make` it (the network, holder and proxy, at once; the
        server's container can be created meanwhile, `network_mode` names what it joins), start
        its server after `wait_network` and call `server_went` once it started (or failed). A
        kept lease's caller starts its server after `wait_created`. Every caller must `release`
        the lease when its session ends, whatever happened.
        """
        policy = egress_policy(spec.egress_allowlist)
        key = (str(engine.api.base_url), spec.owner, spec.server_key, policy)
        superseded: list[StandingEgress] = []
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and not entry.usable:
                entry = None
            for other in list(self._entries.values()):
                if other is not entry and other.key[:3] == key[:3]:
                    other.retired = True  # the same server with another policy: it goes
                    if other.users == 0:
                        superseded.append(other)
                        del self._entries[other.key]
            fresh = entry is None
            if entry is None:
                session_id = f"egress-{secrets.token_hex(6)}"
                entry = StandingEgress(
                    key=key,
                    server_key=spec.server_key,
                    policy=policy,
                    session_id=session_id,
                    network_name=f"toolroom-{spec.server_key.lower()}-net-{session_id}",
                    proxy_name=f"toolroom-{spec.server_key.lower()}-proxy-{session_id}",
                    holder_name=f"toolroom-{spec.server_key.lower()}-netns-{session_id}",
                )
                self._entries[key] = entry
            entry.users += 1
            if not fresh:
                entry.holder_wanted.set()
        for old in superseded:
            self._remove(engine, old)
        return EgressLease(entry, fresh)

    def make(
        self,
        engine: Engine,
        lease: EgressLease,
        spec: ContainerSpec,
        *,
        image: Callable[[], str],
        timeout: float,
    ) -> None:
        """Make a fresh lease's network, holder and proxy, at the same time: the containers are
        created (they name the network, which the engine checks only at start) while the
        network is (`network_made`: the first session's server, on the network itself, may
        start then). Once that server started (`server_went`; at once without one: `prepare`)
        the proxy starts: starts on a network take the engine's locks in turn, and the server's
        is what its session waits for first. Returns when the proxy is started (its READY line
        sets `ready`). The holder, which only later sessions need, starts in the background
        once the proxy listens and another session wants it or the first one ended (or
        `timeout` later): `created` when it runs, `settled` when done either way (`_remove`
        waits for that). `image`: the proxy image's reference."""
        entry = lease.entry
        proxy_started = threading.Event()
        failures: list[BaseException] = []

        def branch(work: Callable[[], None], what: str) -> None:
            try:
                work()
            except BaseException as exc:
                failures.append(exc)
                self._fail(entry, f"{what}: {exc}")
                # The others must not wait for what will not come (`_fail` sets `ready`).
                entry.network_made.set()
                proxy_started.set()

        def go_on(step: threading.Event) -> bool:
            """Wait for `step`; False when another branch failed (or all goes) meanwhile."""
            step.wait(timeout)
            return not (entry.dead or entry.retired)

        def network() -> None:
            entry.network_id = networks.create_session_network(
                engine, entry.network_name, self._labels(spec, entry, role="network")
            )
            entry.network_made.set()

        def proxy() -> None:
            self._create_proxy(engine, spec, entry, image=image())
            if not go_on(entry.network_made):
                return
            engine.api.connect_container_to_network(
                entry.proxy_id, entry.network_id, aliases=[networks.PROXY_ALIAS]
            )
            if not go_on(entry.first_server_went):
                return
            engine.api.start(entry.proxy_id)
            proxy_started.set()

        def holder() -> None:
            # Only once another session needs it or the first one ended (or `timeout` later):
            # a start takes CPU the first session's server and proxy need for their own. Not
            # created before either: a created container that never started would not follow
            # a dying worker (its stdin is not open yet).
            if not go_on(proxy_started) or not go_on(entry.ready):
                return
            if not go_on(entry.holder_wanted):
                return
            self._create_holder(engine, spec, entry)
            engine.api.start(entry.holder_id)

        def holder_branch() -> None:
            try:
                branch(holder, "the network namespace's holder could not start")
            finally:  # after a failure is recorded: waiters see it
                entry.created.set()
                entry.settled.set()

        entry.making = True
        threading.Thread(
            target=holder_branch,
            name=f"egress-netns-start-{spec.server_key}",
            daemon=True,
        ).start()
        proxy_thread = threading.Thread(
            target=branch,
            args=(proxy, "the egress proxy could not start"),
            name=f"egress-proxy-start-{spec.server_key}",
        )
        proxy_thread.start()
        try:
            branch(network, "the session network could not be made")
        finally:
            proxy_thread.join()
        if failures:
            raise failures[0]

    def wait_network(self, lease: EgressLease, *, timeout: float) -> None:
        """Wait until a fresh lease's network exists: its server may start then."""
        _wait_for_step(lease.entry, lease.entry.network_made, timeout=timeout)

    def server_went(self, lease: EgressLease) -> None:
        """A fresh lease's server started (or will not): the proxy and holder start now."""
        lease.entry.first_server_went.set()

    def wait_created(self, lease: EgressLease, *, timeout: float) -> None:
        """Wait until the lease's holder runs: the server's container may start then."""
        _wait_for_step(lease.entry, lease.entry.created, timeout=timeout)

    def _create_holder(self, engine: Engine, spec: ContainerSpec, entry: StandingEgress) -> None:
        """The container whose network namespace (on the kept network only) the server's
        containers join: starting a container in an existing namespace costs less than
        attaching it to a network (no interface, address or DNS set up at each start).
        Created and attached to here (before its start: it follows a dying worker)."""
        host_config = engine.api.create_host_config(
            **hardened_host_config(
                memory_mb=HOLDER_MEMORY_MB,
                cpus=HOLDER_CPUS,
                pids_limit=HOLDER_PIDS,
                read_only_root=True,
                tmpfs_mb=1,
                network_mode=entry.network_name,
                dns=networks.ISOLATED_DNS,
            ),
            dns_opt=list(networks.ISOLATED_DNS_OPTIONS),
        )
        created = engine.api.create_container(
            BASE_IMAGE,
            command=HOLDER_COMMAND,
            name=entry.holder_name,
            user=NOBODY,
            stdin_open=True,
            tty=False,
            labels=self._labels(spec, entry, role=ROLE_HOLDER),
            host_config=host_config,
            use_config_proxy=False,
        )
        entry.holder_id = str(created["Id"])
        entry.holder_sock = container_attach_socket(
            engine, entry.holder_id, stdin=True, blocking=True
        )
        threading.Thread(
            target=self._watch_holder,
            args=(entry, entry.holder_sock),
            name=f"egress-netns-{spec.server_key}",
            daemon=True,
        ).start()

    def _create_proxy(
        self, engine: Engine, spec: ContainerSpec, entry: StandingEgress, *, image: str
    ) -> None:
        """The proxy, created on the egress bridge and attached to (its READY line is read);
        connected to the session network and started once that exists."""
        egress = networks.ensure_egress_network(engine, installation=spec.installation)
        entry.proxy_id = networks.create_proxy_container(
            engine,
            image=image,
            name=entry.proxy_name,
            allowlist=list(spec.egress_allowlist),
            labels=self._labels(spec, entry, role="proxy"),
            egress_network_id=egress,
        )
        entry.sock = container_attach_socket(engine, entry.proxy_id, stdin=True, blocking=True)
        threading.Thread(
            target=self._read_proxy,
            args=(entry, entry.sock),
            name=f"egress-proxy-{spec.server_key}",
            daemon=True,
        ).start()

    def prepare(
        self,
        engine: Engine,
        spec: ContainerSpec,
        *,
        image: Callable[[], str],
        timeout: float = 60.0,
    ) -> bool:
        """Make `spec`'s network and proxy ahead of its session (while its image is resolved,
        say), and keep them for it; True when they were made now. `image`: the proxy image's
        reference, asked for only when one is made."""
        lease = self.lease(engine, spec)
        try:
            if lease.fresh:
                self.server_went(lease)  # none here
                lease.entry.holder_wanted.set()
                self.make(engine, lease, spec, image=image, timeout=timeout)
            self.wait_created(lease, timeout=timeout)
            self.wait_ready(lease, timeout=timeout)
        finally:
            self.release(engine, lease)
        return lease.fresh

    def wait_ready(self, lease: EgressLease, *, timeout: float) -> None:
        """Wait until the lease's proxy listens (at once when it already did)."""
        entry = lease.entry
        if not entry.ready.wait(timeout):
            raise SandboxError(f"The egress proxy of {entry.server_key} did not start in time.")
        if entry.dead:
            raise SandboxError(
                f"The egress proxy exited while starting: {entry.failure} " + " | ".join(entry.log)
            )

    def listen(self, lease: EgressLease, log: deque[str]) -> None:
        """Copy the proxy's decision lines to `log` while the session lasts."""
        with self._lock:
            lease.entry.listeners.append(log)

    def release(self, engine: Engine, lease: EgressLease, log: deque[str] | None = None) -> None:
        """The session is over: the network stays for the next one, unless it must go."""
        entry = lease.entry
        entry.holder_wanted.set()
        if lease.fresh and not entry.making:  # its maker never got to make it
            self._fail(entry, "it was not made")
            for event in (entry.network_made, entry.first_server_went, entry.created):
                event.set()
        with self._lock:
            if log is not None:
                with contextlib.suppress(ValueError):
                    entry.listeners.remove(log)
            entry.users -= 1
            entry.idle_since = time.monotonic()
            remove = entry.users <= 0 and not entry.usable
            if remove and self._entries.get(entry.key) is entry:
                del self._entries[entry.key]
            elif entry.users <= 0:
                self._start_reaper()
        if remove:
            self._remove(engine, entry)

    # --- removal --------------------------------------------------------------------------------

    def reap_idle(self, engine: Engine | None = None, *, older_than: float | None = None) -> int:
        """Remove the networks no session used for `older_than` (the pool's idle time)."""
        limit = self.idle_seconds if older_than is None else older_than
        now = time.monotonic()
        with self._lock:
            idle = [
                e
                for e in self._entries.values()
                if e.users <= 0 and (now - e.idle_since >= limit or not e.usable)
            ]
            for entry in idle:
                entry.retired = True
                del self._entries[entry.key]
        if idle:
            self._with_engine(engine, lambda e: self._remove_all(e, idle))
        return len(idle)

    def close(self, engine: Engine | None = None) -> None:
        """Remove everything the pool holds (at interpreter exit; sessions are over by then)."""
        with self._lock:
            every = list(self._entries.values())
            self._entries.clear()
            for entry in every:
                entry.retired = True
        self._reaper_wake.set()
        if every:
            self._with_engine(engine, lambda e: self._remove_all(e, every))

    def _remove_all(self, engine: Engine, entries: Iterable[StandingEgress]) -> None:
        for entry in entries:
            self._remove(engine, entry)

    def _remove(self, engine: Engine, entry: StandingEgress) -> None:
        entry.retired = True
        if entry.making:  # its holder may still be starting
            entry.settled.wait(REMOVE_TIMEOUT)
        for sock in (entry.sock, entry.holder_sock):
            if sock is not None:
                # Their stdin closes (they exit by themselves); shutdown also wakes the readers.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
        problems: list[str] = []
        for container in (entry.proxy_id or entry.proxy_name, entry.holder_id or entry.holder_name):
            try:
                engine.api.remove_container(container, force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: auto-remove is already at it
                    problems.append(str(exc))
        try:
            networks.remove_network_when_empty(
                engine, entry.network_id or entry.network_name, timeout=REMOVE_TIMEOUT
            )
        except docker.errors.DockerException as exc:
            problems.append(str(exc))
        if problems:
            logger.error("The egress network %s stays: %s", entry.network_name, "; ".join(problems))

    def _fail(self, entry: StandingEgress, reason: str) -> None:
        entry.dead = True
        entry.failure = entry.failure or reason
        entry.ready.set()
        with self._lock:
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]

    # --- the proxy's output and the idle reaper ---------------------------------------------------

    def _read_proxy(self, entry: StandingEgress, sock: socket.socket) -> None:
        demux = FrameDemuxer()
        lines = LineSplitter(64 * 1024)
        tail = StderrTail(0)
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                for stream, piece in demux.feed(data):
                    if stream == STDOUT and not entry.ready.is_set():
                        if any(line.startswith(b"READY") for line in lines.feed(piece)):
                            entry.ready.set()
                    elif stream == STDERR:
                        for line in tail.feed(piece):
                            entry.log.append(line)
                            with self._lock:
                                listeners = list(entry.listeners)
                            for log in listeners:
                                log.append(line)
                            logger.info("egress proxy for %s: %s", entry.server_key, line)
        except (OSError, StreamProtocolError):
            pass
        self._died(entry, "the egress proxy")

    def _watch_holder(self, entry: StandingEgress, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass
        self._died(entry, "the network namespace's holder")

    def _died(self, entry: StandingEgress, what: str) -> None:
        if entry.retired:
            return  # being removed: _remove does the rest
        logger.warning("%s of %s exited by itself", what, entry.server_key)
        self._fail(entry, f"{what} exited")
        with self._lock:
            unused = entry.users <= 0 and not entry.retired
            entry.retired = True
        if unused:  # else the last session's release removes the network
            self._with_engine(None, lambda engine: self._remove(engine, entry))

    def _start_reaper(self) -> None:
        """(Under the lock.) The thread that removes idle networks, while there are any."""
        if self._reaper is not None and self._reaper.is_alive():
            return
        self._reaper_wake.clear()
        self._reaper = threading.Thread(target=self._reap_loop, name="egress-reaper", daemon=True)
        self._reaper.start()

    def _reap_loop(self) -> None:
        while not self._reaper_wake.wait(min(30.0, max(self.idle_seconds / 4, 0.05))):
            try:
                self.reap_idle()
            except Exception:
                logger.exception("Removing idle egress networks failed")
            with self._lock:
                if not self._entries:
                    self._reaper = None
                    return

    @staticmethod
    def _with_engine(engine: Engine | None, work: Callable[[Engine], object]) -> None:
        own = engine is None
        try:
            engine = engine or connect_engine()
        except SandboxError as exc:
            logger.error("Egress networks could not be removed: %s", exc)
            return
        try:
            work(engine)
        finally:
            if own:
                engine.close()

    @staticmethod
    def _labels(spec: ContainerSpec, entry: StandingEgress, *, role: str) -> dict[str, str]:
        labels = resource_labels(spec, session_id=entry.session_id, role=role)
        labels[LABEL_EGRESS_POLICY] = entry.policy
        return labels


EGRESS_POOL = EgressPool()
atexit.register(EGRESS_POOL.close)


def _wait_for_step(entry: StandingEgress, step: threading.Event, *, timeout: float) -> None:
    """Wait for one step of making a kept network; a failed or late one is a SandboxError."""
    if not step.wait(timeout) or entry.dead:
        raise SandboxError(
            f"The egress network of {entry.server_key} is not there: "
            + (entry.failure or "it was not made in time")
        )
