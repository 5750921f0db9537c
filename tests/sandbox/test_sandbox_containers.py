"""Hostile and honest MCP servers in real containers on a real engine, through `sandbox_transport`.

The engine must be running (scripts/ensure-docker); the images are built on first use and reused
after that (tests/sandbox_images.py). Every connection a test or a container makes targets this
machine: 127.0.0.1, the Docker bridge's address on the host, or the containers themselves. Names
looked up are under .invalid only.
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from typing import Any

import anyio
import docker.errors
import pytest
from mcp import Client, MCPError
from mcp_types import CallToolResult, TextContent

from tests.sandbox_images import SandboxTestImages, ensure_node_test_image
from workers.adapters.sandbox import (
    EGRESS_POOL,
    ContainerFate,
    ContainerSpec,
    EgressPool,
    SandboxError,
    SandboxTransport,
    build_package_image,
    connect_engine,
    egress_policy,
    networks,
    remove_orphans,
    remove_stale_egress,
    remove_surplus_egress_networks,
    sandbox_transport,
)
from workers.adapters.sandbox.egress_pool import LABEL_EGRESS_POLICY
from workers.adapters.sandbox.images import LABEL_INPUTS, NODE_VERSION
from workers.adapters.sandbox.networks import PROXY_ALIAS, PROXY_PORT
from workers.adapters.sandbox.spec import (
    LABEL_INSTALLATION,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_ROLE,
    LABEL_SERVER,
    LABEL_SESSION,
    default_installation,
)

pytestmark = [pytest.mark.anyio, pytest.mark.containers]

HOSTILE = ["python3", "/opt/servers/hostile.py"]


@pytest.fixture(scope="session")
def bridge_address(engine) -> str:
    """The host's address on Docker's default bridge (docker0), e.g. 172.17.0.1."""
    config = engine.api.inspect_network("bridge")["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return str(config["Gateway"])
    # Docker 20.10 leaves it out: the bridge takes the subnet's first address.
    return str(ipaddress.ip_network(config["Subnet"]).network_address + 1)


class Listener:
    """A TCP listener on the host that records who reached it."""

    def __init__(self, host: str) -> None:
        self.socket = socket.create_server((host, 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.accepted: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.socket.accept()
            except TimeoutError:
                continue
            self.accepted.append(peer)
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.socket.close()


@pytest.fixture
def bridge_listener(bridge_address) -> Iterator[Listener]:
    listener = Listener(bridge_address)
    yield listener
    listener.close()


class Greeting(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.server.server_address[1]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def bridge_http(bridge_address) -> Iterator[list[int]]:
    """Two HTTP servers on the host's bridge address: the first is allowlisted, the second not."""
    servers = [ThreadingHTTPServer((bridge_address, 0), Greeting) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    yield [s.server_address[1] for s in servers]
    for server, thread in zip(servers, threads, strict=True):
        server.shutdown()
        server.server_close()
        thread.join(5)


def hostile(images: SandboxTestImages, **overrides: Any) -> ContainerSpec:
    values: dict[str, Any] = {
        "server_key": "hostile",
        "image": images.servers.reference,
        "argv": HOSTILE,
        "memory_mb": 256,
        "pids_limit": 64,
        "cpus": 1.0,
    }
    return ContainerSpec(**(values | overrides))


def text_of(result: CallToolResult) -> str:
    assert not result.is_error, result
    content = result.content[0]
    assert isinstance(content, TextContent)
    return content.text


async def call(client: Client, tool: str, **arguments: Any) -> str:
    return text_of(await client.call_tool(tool, arguments))


def fate_of_error(error: SandboxError) -> ContainerFate:
    assert error.fate is not None
    return error.fate


def fate_of(transport: SandboxTransport) -> ContainerFate:
    assert transport.fate is not None, "the transport did not record how the container ended"
    return transport.fate


def leaf_types(error: BaseException | None) -> set[type]:
    if isinstance(error, BaseExceptionGroup):
        return set().union(*(leaf_types(e) for e in error.exceptions))
    return {type(error)}


def left_behind(engine, session_id: str) -> list[str]:
    filters = {"label": f"{LABEL_SESSION}={session_id}"}
    containers = engine.api.containers(all=True, filters=filters)
    networks = engine.api.networks(filters=filters)
    return [c["Names"][0] for c in containers] + [n["Name"] for n in networks]


async def assert_contained(client: Client, *, bridge_address: str, listener: Listener) -> None:
    """Every escape fails, visibly; the honest tools keep working on the same session."""
    who = await call(client, "whoami")
    assert '"uid": "65534"' in who
    assert '"euid": "65534"' in who
    assert '"cap_eff": "0000000000000000"' in who
    assert '"no_new_privs": "1"' in who
    assert '"seccomp": "2"' in who

    assert "Read-only file system" in await call(client, "write_root")
    assert "Permission denied" in await call(client, "exec_from_tmp")
    socket_outcome = await call(client, "docker_socket")
    assert socket_outcome.count("FileNotFoundError") == 2
    escalation = await call(client, "setuid_escalate")
    assert "/etc/shadow: Permission denied" in escalation
    assert escalation.endswith("suid-python euid 65534")
    assert "gaierror" in await call(client, "resolve", name="exfil.invalid")

    outward = await call(client, "connect", host=bridge_address, port=listener.port, timeout=1.0)
    assert outward.startswith(("OSError", "TimeoutError")), outward
    local = await call(client, "connect", host="127.0.0.1", port=listener.port, timeout=1.0)
    assert local.startswith("ConnectionRefusedError"), local
    assert listener.accepted == []

    fork = await call(client, "fork_bomb")
    assert fork.startswith("fork failed after"), fork
    assert "Resource temporarily unavailable" in fork
    assert int(fork.split()[3]) < 64

    assert await call(client, "echo", text="still here") == "still here"
    assert await call(client, "add", a=2, b=3) == "5"


@pytest.mark.parametrize("mode", ["none", "internal", "proxied"])
async def test_a_hostile_server_cannot_get_out_in_any_restricted_mode(
    engine, images, bridge_address, bridge_listener, mode
):
    transport = sandbox_transport(hostile(images, network_mode=mode), engine=engine)
    async with Client(transport) as client:
        await assert_contained(client, bridge_address=bridge_address, listener=bridge_listener)
        interfaces = await call(client, "whoami")
    assert ('"interfaces": "lo"' in interfaces) is (mode == "none")
    assert transport.fate is not None
    assert fate_of(transport).exit_code == 0
    assert not fate_of(transport).failed
    assert left_behind(engine, transport.session_id) == []


async def test_in_bridge_mode_the_host_stays_shut_but_egress_is_open_by_design(
    engine, images, bridge_address, bridge_listener
):
    # Bridge mode is the unrestricted egress that only trusted tiers get: the server reaches the
    # host's bridge address; everything else that is not networking stays refused.
    transport = sandbox_transport(hostile(images, network_mode="bridge"), engine=engine)
    async with Client(transport) as client:
        assert "Read-only file system" in await call(client, "write_root")
        assert "Permission denied" in await call(client, "setuid_escalate")
        assert "FileNotFoundError" in await call(client, "docker_socket")
        assert (await call(client, "fork_bomb")).startswith("fork failed after")
        reached = await call(
            client, "connect", host=bridge_address, port=bridge_listener.port, timeout=1.0
        )
        assert reached == f"connected to {bridge_address}:{bridge_listener.port}"
        assert await call(client, "echo", text="ok") == "ok"
    assert left_behind(engine, transport.session_id) == []


async def test_workers_racing_to_create_the_egress_bridge_never_make_it_ambiguous(engine, images):
    # Docker lets two networks share a name when they are created at the same moment, and then no
    # container starts on that name ("network ... is ambiguous"): seen in this suite when sessions
    # started together. Each creation has a name of its own and everyone takes the oldest.
    # The proxies this process keeps (earlier proxied tests) are on the bridge: they go first.
    # Only this run's installation's bridges are touched (another Toolroom may share the engine).
    EGRESS_POOL.close(engine)
    for network in networks.egress_networks(engine):
        networks.remove_network_when_empty(engine, network["Id"])
    barrier = threading.Barrier(4)
    chosen: list[str] = []

    def first_use() -> None:
        own = connect_engine()  # one engine client per worker, as workers have
        try:
            barrier.wait()
            chosen.append(networks.ensure_egress_network(own))
        finally:
            own.close()

    racers = [threading.Thread(target=first_use) for _ in range(4)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    made = networks.egress_networks(engine)
    names = [n["Name"] for n in made]
    assert len(names) == len(set(names)), names
    assert set(chosen) <= {n["Id"] for n in made}
    # Make sure there are surplus ones: a creation that lost the race by a little, and two of one
    # name, as the old fixed name let a race make (never used: nothing starts on them).
    labels = {
        LABEL_MANAGED: "true",
        LABEL_ROLE: networks.ROLE_EGRESS_NETWORK,
        LABEL_INSTALLATION: default_installation(),
    }
    for name in ("late", "namesake", "namesake"):
        engine.api.create_network(f"{networks.EGRESS_NETWORK}-{name}", labels=labels)
    oldest = networks.egress_networks(engine)[0]
    assert networks.ensure_egress_network(engine) == oldest["Id"]
    assert oldest["Name"] not in (f"{networks.EGRESS_NETWORK}-{n}" for n in ("late", "namesake"))

    transport = sandbox_transport(hostile(images, network_mode="bridge"), engine=engine)
    async with Client(transport) as client:
        assert await call(client, "echo", text="on the bridge") == "on the bridge"
        # While a session runs on the oldest bridge, the janitor removes the unused surplus.
        removed = remove_surplus_egress_networks(engine=engine)
        expected = [f"network {networks.EGRESS_NETWORK}-{n}" for n in ("late", "namesake") * 2]
        expected.remove(f"network {networks.EGRESS_NETWORK}-late")
        assert sorted(line for line in removed if line in expected) == sorted(expected)
        assert [n["Id"] for n in networks.egress_networks(engine)] == [oldest["Id"]]
    assert remove_surplus_egress_networks(engine=engine) == []


async def test_a_memory_hog_is_oom_killed_and_the_reason_is_clear(engine, images):
    seen: list[Exception] = []

    async def on_message(message) -> None:
        if isinstance(message, Exception):
            seen.append(message)

    transport = sandbox_transport(hostile(images, memory_mb=128), engine=engine)

    async def hog() -> None:
        async with Client(transport, message_handler=on_message) as client:
            assert await call(client, "echo", text="before") == "before"
            await client.call_tool("hog", {"megabytes": 1024})

    with pytest.raises(SandboxError) as failed:
        await hog()
    # Raised from the session's own error (the SDK's task groups may have grouped it).
    assert MCPError in leaf_types(failed.value.__cause__)
    fate = failed.value.fate
    assert fate is not None
    assert fate.oom_killed
    assert fate.exit_code == 137
    assert str(failed.value) == (
        "hostile: the server was killed for using more than 128 MB of memory (OOM)"
    )
    assert transport.fate == fate
    assert any(isinstance(e, SandboxError) and e.fate == fate for e in seen)
    assert left_behind(engine, transport.session_id) == []


async def test_garbage_on_stdout_is_an_exception_value_and_the_session_goes_on(engine, images):
    seen: list[Exception] = []

    async def on_message(message) -> None:
        if isinstance(message, Exception):
            seen.append(message)

    transport = sandbox_transport(hostile(images), engine=engine)
    async with Client(transport, message_handler=on_message) as client:
        assert await call(client, "garbage") == "sent garbage"
        assert await call(client, "echo", text="after") == "after"
    assert len(seen) == 1
    assert isinstance(seen[0], ValueError)
    assert not fate_of(transport).failed


async def test_a_crash_is_reported_with_its_exit_code_and_last_stderr_line(engine, images):
    transport = sandbox_transport(hostile(images), engine=engine)
    with pytest.raises(SandboxError) as failed:
        async with Client(transport) as client:
            await client.call_tool("crash", {"code": 3})
    assert str(failed.value) == (
        "hostile: the server exited with code 3; last stderr line: crashing with exit code 3"
    )
    assert fate_of_error(failed.value).exit_code == 3
    assert left_behind(engine, transport.session_id) == []


async def test_stderr_is_kept_as_a_bounded_tail(engine, images):
    transport = sandbox_transport(hostile(images), engine=engine, stderr_lines=3)
    async with Client(transport) as client:
        await call(client, "shout", lines=10)
    assert transport.stderr_tail()[-3:] == ("stderr line 7", "stderr line 8", "stderr line 9")
    assert len(transport.stderr_tail()) == 3
    assert fate_of(transport).stderr_tail == transport.stderr_tail()


async def test_a_line_longer_than_the_limit_stops_the_server(engine, images):
    transport = sandbox_transport(hostile(images), engine=engine, max_line_bytes=4096)
    with pytest.raises(SandboxError) as failed:
        async with Client(transport) as client:
            await client.call_tool("echo", {"text": "x" * 10000})
    assert "longer than 4096 bytes" in str(failed.value)
    assert fate_of_error(failed.value).stopped_by_toolroom
    assert left_behind(engine, transport.session_id) == []


async def test_cancelling_the_caller_removes_the_container_and_network(engine, images):
    transport = sandbox_transport(hostile(images, network_mode="internal"), engine=engine)
    started = time.monotonic()
    with anyio.move_on_after(4) as scope:
        async with Client(transport) as client:
            await client.call_tool("nap", {"seconds": 60})
    assert scope.cancelled_caught
    assert time.monotonic() - started < 15
    assert fate_of(transport).stopped_by_toolroom
    assert left_behind(engine, transport.session_id) == []


async def test_a_server_that_ignores_the_end_of_stdin_is_killed_on_exit(engine, images):
    spec = hostile(images, env={"HOSTILE_IGNORE_STDIN_EOF": "1"})
    transport = sandbox_transport(spec, engine=engine, stop_grace=0.5)
    async with Client(transport) as client:
        await call(client, "echo", text="hi")
    assert fate_of(transport).stopped_by_toolroom
    assert not fate_of(transport).failed
    assert left_behind(engine, transport.session_id) == []


async def test_a_missing_image_is_explained(engine):
    spec = ContainerSpec(server_key="ghost", image="toolroom/does-not-exist:1")
    with pytest.raises(SandboxError, match="is not on the engine: build it first"):
        async with Client(sandbox_transport(spec, engine=engine)):
            pass


async def test_a_command_missing_from_the_image_is_explained(engine, images):
    transport = sandbox_transport(hostile(images, argv=["/no/such/server"]), engine=engine)
    with pytest.raises(SandboxError) as failed:
        async with Client(transport):
            pass
    assert str(failed.value).startswith(
        "hostile: the server's command was not found in the image (exit code 127); last stderr "
        "line: [FATAL tini"
    )
    assert str(failed.value).endswith("exec /no/such/server failed: No such file or directory")
    assert left_behind(engine, transport.session_id) == []


async def test_the_published_time_server_runs_sandboxed_without_network(engine, images):
    assert images.time_server.commands == ("mcp-server-time",)
    spec = ContainerSpec(server_key="time", image=images.time_server.digest, memory_mb=256)
    transport = sandbox_transport(spec, engine=engine)
    async with Client(transport) as client:
        tools = await client.list_tools()
        assert {tool.name for tool in tools.tools} >= {"get_current_time", "convert_time"}
        result = await client.call_tool("get_current_time", {"timezone": "Europe/Paris"})
    assert "Europe/Paris" in text_of(result)
    assert left_behind(engine, transport.session_id) == []


async def test_an_npm_server_runs_sandboxed_on_the_node_base(engine):
    image = ensure_node_test_image(engine, say=lambda _line: None)
    assert image.commands == ("mcp-server-memory",)
    # A maintained Node.js from the npm registry, not Debian's end-of-life 18.
    assert image.node_version == NODE_VERSION
    spec = ContainerSpec(
        server_key="memory",
        image=image.digest,
        env={"MEMORY_FILE_PATH": "/tmp/memory.jsonl"},
        memory_mb=256,
    )
    transport = sandbox_transport(spec, engine=engine)
    async with Client(transport) as client:
        tools = await client.list_tools()
        assert {"create_entities", "read_graph"} <= {tool.name for tool in tools.tools}
        await call(
            client,
            "create_entities",
            entities=[{"name": "toolroom", "entityType": "project", "observations": ["sandboxed"]}],
        )
        assert "toolroom" in await call(client, "read_graph")
    assert left_behind(engine, transport.session_id) == []


def test_a_package_image_is_reused_for_the_same_package_and_base(engine, images):
    again = build_package_image(
        "pypi", "mcp-server-time", version("mcp-server-time"), engine=engine
    )
    assert not again.built
    assert (again.reference, again.digest) == (
        images.time_server.reference,
        images.time_server.digest,
    )
    inputs = engine.images.get(again.reference).labels[LABEL_INPUTS]
    # The base image's ID is an input: a rebuilt base gives a new tag, hence a rebuild.
    assert images.base.digest in inputs
    assert f"mcp-server-time=={version('mcp-server-time')}" in inputs


async def test_a_proxied_server_reaches_only_its_allowlist(
    engine, images, bridge_address, bridge_http
):
    allowed, other = bridge_http
    spec = hostile(images, network_mode="proxied", egress_allowlist=[f"{bridge_address}:{allowed}"])
    transport = sandbox_transport(spec, engine=engine)
    async with Client(transport) as client:
        assert await call(client, "http_get", url=f"http://{bridge_address}:{allowed}/") == (
            f"200 hello from {allowed}"
        )
        refused = await call(client, "http_get", url=f"http://{bridge_address}:{other}/")
        assert refused.startswith("403 Toolroom egress proxy:")
        assert "is not on this server's egress allowlist" in refused
        named = await call(client, "http_get", url="http://exfil.invalid/")
        assert named == (
            "403 Toolroom egress proxy: exfil.invalid:80 is not on this server's egress allowlist"
        )
        # Around the proxy, straight to the allowed server: no route.
        direct = await call(client, "connect", host=bridge_address, port=allowed, timeout=1.0)
        assert direct.startswith(("OSError", "TimeoutError")), direct
    assert any(
        line.startswith(f"allow GET {bridge_address}:{allowed}") for line in transport.proxy_log
    )
    assert any(line.startswith("deny GET http://exfil.invalid/") for line in transport.proxy_log)
    assert left_behind(engine, transport.session_id) == []


async def test_an_allowlisted_name_that_resolves_to_an_internal_address_is_refused(engine, images):
    """Issue 26, Medium 4: the proxy's own alias is a name Docker's DNS resolves to a private
    address on the server's network. Allowlisted, it still may not be reached: the proxy applies
    the URL guard's rule (registry/core/netguard.py) to what the name resolves to."""
    spec = hostile(images, network_mode="proxied", egress_allowlist=[f"{PROXY_ALIAS}:{PROXY_PORT}"])
    transport = sandbox_transport(spec, engine=engine)
    async with Client(transport) as client:
        refused = await call(client, "http_get", url=f"http://{PROXY_ALIAS}:{PROXY_PORT}/")
    assert refused.startswith(f"403 Toolroom egress proxy: {PROXY_ALIAS} resolves to "), refused
    assert "(a private address), which no listed name may reach" in refused
    assert left_behind(engine, transport.session_id) == []


async def test_the_janitor_removes_what_a_killed_worker_left_but_not_a_live_ones(engine, images):
    owner = f"janitor-test-{time.monotonic_ns()}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.sandbox_dying_worker", owner, images.servers.reference],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "READY"
    finally:
        worker.kill()
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()
    filters = {"label": f"{LABEL_OWNER}={owner}"}
    # The proxy follows its dead worker by itself (its stdin closed); the stubborn server stays.
    deadline = time.monotonic() + 10
    while len(engine.api.containers(all=True, filters=filters)) > 1:
        assert time.monotonic() < deadline, engine.api.containers(all=True, filters=filters)
        await anyio.sleep(0.2)
    assert len(engine.api.networks(filters=filters)) == 1

    # A live session of the same owner in this process is not an orphan.
    live = sandbox_transport(hostile(images, owner=owner), engine=engine)
    async with Client(live) as client:
        removed = remove_orphans(owner_label_value=owner, engine=engine)
        assert await call(client, "echo", text="alive") == "alive"
    assert sorted(line.split()[0] for line in removed) == ["container", "network"]
    assert all("dying-worker" in line for line in removed)
    assert engine.api.containers(all=True, filters=filters) == []
    assert engine.api.networks(filters=filters) == []


# --- The proxied mode's kept networks (egress_pool): each test has a pool and a server key of its
# own, and closes the pool at the end.


@pytest.fixture
def pool(engine) -> Iterator[EgressPool]:
    made = EgressPool(idle_seconds=600)
    yield made
    made.close(engine)


def new_server_key() -> str:
    return f"egress-{time.monotonic_ns()}"


def kept_networks(engine, server_key: str) -> list[str]:
    found = engine.api.networks(filters={"label": [f"{LABEL_SERVER}={server_key}"]})
    return sorted(n["Id"] for n in found if LABEL_EGRESS_POLICY in (n.get("Labels") or {}))


def exists(engine, kind: str, ident: str) -> bool:
    try:
        if kind == "network":
            engine.api.inspect_network(ident)
        else:
            engine.api.inspect_container(ident)
    except docker.errors.NotFound:
        return False
    return True


async def until(condition, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        await anyio.sleep(0.1)


async def test_a_restarted_proxied_server_reuses_its_network_and_proxy(
    engine, images, pool, bridge_http, bridge_address
):
    server_key = new_server_key()
    allowed, other = bridge_http
    spec = hostile(
        images,
        server_key=server_key,
        network_mode="proxied",
        egress_allowlist=[f"{bridge_address}:{allowed}"],
    )
    seen: list[tuple[str, str, bool]] = []
    modes: list[str] = []
    logs = []
    for _ in range(2):
        transport = sandbox_transport(spec, engine=engine, egress_pool=pool)
        async with Client(transport) as client:
            assert await call(client, "http_get", url=f"http://{bridge_address}:{allowed}/") == (
                f"200 hello from {allowed}"
            )
            refused = await call(client, "http_get", url=f"http://{bridge_address}:{other}/")
            assert refused.startswith("403 Toolroom egress proxy:")
            [entry] = pool.entries()
            seen.append((entry.network_id, entry.proxy_id, transport.container_id is not None))
            host_config = engine.api.inspect_container(transport.container_id)["HostConfig"]
            modes.append(host_config["NetworkMode"])
        logs.append(list(transport.proxy_log))
        # The session is over; its network and proxy stay for the next one.
        assert exists(engine, "network", entry.network_id)
        assert exists(engine, "container", entry.proxy_id)
        assert entry.users == 0

    assert seen[0] == seen[1], "the second session made a network and proxy of its own"
    # The session that made the network was on it itself (its start did not wait for the
    # holder's); the next one ran in the holder's namespace.
    assert modes[0] == entry.network_name
    assert modes[1] in (f"container:{entry.holder_id}", f"container:{entry.holder_name}")
    holder = engine.api.inspect_container(entry.holder_id)["NetworkSettings"]["Networks"]
    assert [n["NetworkID"] for n in holder.values()] == [entry.network_id]
    # Each session's log has its own decisions, not the other's.
    for log in logs:
        assert sum(line.startswith(f"allow GET {bridge_address}:{allowed}") for line in log) == 1
        assert sum(line.startswith("deny GET") for line in log) == 1
    assert kept_networks(engine, server_key) == [seen[0][0]]

    pool.close(engine)
    assert not exists(engine, "network", seen[0][0])
    assert not exists(engine, "container", seen[0][1])


async def test_a_changed_allowlist_gets_a_new_network_and_the_old_one_goes(
    engine, images, pool, bridge_address, bridge_http
):
    server_key = new_server_key()
    first, second = bridge_http

    async def session(allowed: int, denied: int) -> tuple[str, str]:
        spec = hostile(
            images,
            server_key=server_key,
            network_mode="proxied",
            egress_allowlist=[f"{bridge_address}:{allowed}"],
        )
        async with Client(sandbox_transport(spec, engine=engine, egress_pool=pool)) as client:
            assert await call(client, "http_get", url=f"http://{bridge_address}:{allowed}/") == (
                f"200 hello from {allowed}"
            )
            refused = await call(client, "http_get", url=f"http://{bridge_address}:{denied}/")
            assert refused.startswith("403 Toolroom egress proxy:"), refused
            [entry] = pool.entries()
            return entry.network_id, entry.proxy_id

    old_network, old_proxy = await session(first, second)
    new_network, new_proxy = await session(second, first)

    assert new_network != old_network
    assert new_proxy != old_proxy
    assert not exists(engine, "network", old_network)
    assert not exists(engine, "container", old_proxy)
    assert kept_networks(engine, server_key) == [new_network]


async def test_the_janitor_leaves_a_live_one_and_stale_ones_go_once_no_session_is_on_them(
    engine, images, pool
):
    server_key = new_server_key()
    spec = hostile(images, server_key=server_key, network_mode="proxied")
    async with Client(sandbox_transport(spec, engine=engine, egress_pool=pool)) as client:
        await call(client, "echo", text="one")
    [entry] = pool.entries()

    # Held by this (live) process: no orphan, though no session is on it.
    removed = remove_orphans(owner_label_value=spec.owner, engine=engine)
    assert not any(entry.network_name in line for line in removed), removed
    assert exists(engine, "network", entry.network_id)

    # The registry still wants it with this policy: it stays.
    wanted = {server_key: egress_policy(spec.egress_allowlist)}
    assert remove_stale_egress(wanted, engine=engine, servers=[server_key]) == []
    assert exists(engine, "network", entry.network_id)

    # Retired (not wanted any more) while a session is on it: it stays until the session ends.
    async with Client(sandbox_transport(spec, engine=engine, egress_pool=pool)) as client:
        assert remove_stale_egress({}, engine=engine, servers=[server_key]) == []
        assert await call(client, "echo", text="two") == "two"
    assert exists(engine, "network", entry.network_id)

    removed = remove_stale_egress({}, engine=engine, servers=[server_key])
    assert removed == [f"network {entry.network_name}"]
    assert not exists(engine, "network", entry.network_id)
    assert not exists(engine, "container", entry.proxy_id)
    # The pool saw its proxy go and never hands that network out again.
    await until(lambda: pool.entries() == [])
    async with Client(sandbox_transport(spec, engine=engine, egress_pool=pool)) as client:
        assert await call(client, "echo", text="three") == "three"
    [again] = pool.entries()
    assert again.network_id != entry.network_id


async def test_a_proxy_that_dies_is_replaced_and_an_idle_network_goes(engine, images):
    server_key = new_server_key()
    pool = EgressPool(idle_seconds=1.0)
    try:
        spec = hostile(images, server_key=server_key, network_mode="proxied")
        async with Client(sandbox_transport(spec, engine=engine, egress_pool=pool)) as client:
            await call(client, "echo", text="one")
        [entry] = pool.entries()
        engine.api.kill(entry.proxy_id)
        await until(lambda: pool.entries() == [])
        # A dead proxy's network goes with it when no session is on it.
        await until(lambda: not exists(engine, "network", entry.network_id))

        async with Client(sandbox_transport(spec, engine=engine, egress_pool=pool)) as client:
            assert await call(client, "echo", text="two") == "two"
        [fresh] = pool.entries()
        assert fresh.network_id != entry.network_id
        # Idle for longer than the pool's idle time: removed by the reaper.
        await until(lambda: not exists(engine, "network", fresh.network_id), seconds=20)
        assert not exists(engine, "container", fresh.proxy_id)
        assert pool.entries() == []
    finally:
        pool.close(engine)


async def test_a_network_prepared_ahead_is_the_one_the_first_session_finds(engine, images, pool):
    spec = hostile(images, server_key=new_server_key(), network_mode="proxied")
    asked: list[str] = []

    def proxy_image() -> str:
        asked.append("proxy image")
        return str(images.proxy.reference)

    made = await anyio.to_thread.run_sync(
        lambda: pool.prepare(engine, spec, image=proxy_image, timeout=60)
    )
    [prepared] = pool.entries()
    assert made
    assert asked == ["proxy image"]
    assert prepared.users == 0
    assert prepared.ready.is_set()
    # Again: found kept, nothing made or asked.
    assert not await anyio.to_thread.run_sync(
        lambda: pool.prepare(engine, spec, image=proxy_image, timeout=60)
    )
    assert asked == ["proxy image"]

    transport = sandbox_transport(spec, engine=engine, egress_pool=pool)
    async with Client(transport) as client:
        assert await call(client, "echo", text="ready") == "ready"
        [entry] = pool.entries()
        assert entry is prepared
        assert entry.users == 1
        # The server runs in the namespace of the kept network's holder.
        host_config = engine.api.inspect_container(transport.container_id)["HostConfig"]
        assert host_config["NetworkMode"] == f"container:{prepared.holder_id}"
        holder = engine.api.inspect_container(prepared.holder_id)["NetworkSettings"]["Networks"]
        assert [n["NetworkID"] for n in holder.values()] == [prepared.network_id]


async def test_a_first_session_whose_server_cannot_start_still_leaves_a_usable_network(
    engine, images, pool
):
    # The network, holder and proxy are made while the server's container is created; the
    # server's fails (no such image), and what was made alongside is made whole and kept.
    server_key = new_server_key()
    broken = hostile(
        images, server_key=server_key, network_mode="proxied", image="toolroom/no-such:image"
    )
    with pytest.raises(SandboxError, match="is not on the engine"):
        async with Client(sandbox_transport(broken, engine=engine, egress_pool=pool)):
            pass
    [entry] = pool.entries()
    assert entry.usable
    assert entry.users == 0
    # The proxy started all the same; the holder once the session ended.
    await until(entry.ready.is_set)
    await until(entry.created.is_set)

    spec = hostile(images, server_key=server_key, network_mode="proxied")
    transport = sandbox_transport(spec, engine=engine, egress_pool=pool)
    async with Client(transport) as client:
        assert await call(client, "echo", text="after") == "after"
        assert pool.entries() == [entry]
        host_config = engine.api.inspect_container(transport.container_id)["HostConfig"]
        assert host_config["NetworkMode"] in (
            f"container:{entry.holder_id}",
            f"container:{entry.holder_name}",
        )
    assert kept_networks(engine, server_key) == [entry.network_id]
