"""The production stack of docker-compose.yml, run for real from nothing to a tool call.

`make stack-test` builds the local images (`make images`: Debian's packages, no registry) and
runs this module alone; the rest of the suite deselects it (marker `stack`, option `--stack`).
CI runs it once per run, as its own tier (.ci/run).

From empty volumes, `docker compose up` (with deploy/local-images.env and tests/stack/compose.yml,
which mounts the test MCP server where servers run) brings up migrate, web, gateway (2
replicas), gateway-lb, worker, discovery, runtime, beat, PostgreSQL, Redis and the Docker socket
proxy; each must be healthy by its own health check. Then, as an operator would, through
manage.py in the web container: createsuperuser (and a sign-in to the admin over HTTP), an
import of an mcp.json, a discovery done by the discovery worker, approval of the server and its
tools, a team, a grant and an agent token. The agent then calls a tool through gateway-lb with
the official SDK client; the calls spread over both gateway replicas (no stickiness); one
replica is stopped in the middle of a run of calls, and every call still succeeds.

The SDK client speaks the 2026-07-28 protocol (`mode="2026-07-28"`, no session) and the
handshake (`mode="legacy"`, 2025-11-25 with `Mcp-Session-Id`): a handshake session's requests
spread over both replicas too (its record is in the stack's Redis, docs/gateway.md "Sessions
across replicas"), and a session opened before a replica is stopped calls on through the other.

The Docker engine here is shared with other work (other test runs' sandboxes). A worker that
starts removes the sandbox networks and proxies its own database knows nothing of, so the test's
socket proxy answers the workers' list calls (containers, networks, images) with an empty list:
the production proxy configuration plus that one rule, checked below. Nothing in this test runs
a sandbox, and the rest of the proxy's rules are checked from a worker container.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = [pytest.mark.stack, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
# The compose project: its own name, so the test never touches other containers. With
# TOOLROOM_STACK_KEEP=1 the stack is left running after the test (to look at); the next run
# removes it first either way.
PROJECT = os.environ.get("TOOLROOM_STACK_PROJECT", "toolroom-stack-test")
HOSTNAME = "stack.toolroom.test"
LOCAL_IMAGES = ROOT / "deploy" / "local-images.env"
COMPOSE_FILES = (ROOT / "docker-compose.yml", ROOT / "tests" / "stack" / "compose.yml")
LOG_DIR = ROOT / "var" / "stack-test"
HEALTHY_WITHIN_SECONDS = 360
# Every long-running service, with how many containers it runs (gateway: 2 replicas).
SERVICES = {
    "web": 1,
    "gateway": 2,
    "gateway-lb": 1,
    "worker": 1,
    "discovery": 1,
    "runtime": 1,
    "beat": 1,
    "postgres": 1,
    "redis": 1,
    "docker-socket-proxy": 1,
}
SERVER_SLUG = "stack-echo"
TOOL = f"{SERVER_SLUG}__echo"
MCP_JSON = {
    "mcpServers": {
        SERVER_SLUG: {
            "command": "python",
            "args": ["/opt/toolroom-test-servers/scenario_server.py", "--name", SERVER_SLUG],
        }
    }
}


def _compose_cli() -> list[str]:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=60, check=False
        ).returncode
        == 0
    ):
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy:
        return [legacy]
    pytest.fail("no Docker Compose CLI: make stack-test installs Debian's docker-compose")


@dataclass
class Stack:
    """The running stack: compose commands for it, and the addresses published on loopback."""

    cli: list[str]
    env: dict[str, str]
    web: str = ""
    gateway: str = ""

    def compose(
        self, *args: str, input: str | None = None, timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        files = [arg for path in COMPOSE_FILES for arg in ("--file", str(path))]
        done = subprocess.run(
            [*self.cli, "--project-name", PROJECT, "--env-file", str(LOCAL_IMAGES), *files, *args],
            cwd=ROOT,
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check:
            assert done.returncode == 0, (
                f"docker compose {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def manage(self, *args: str, input: str | None = None, env: Sequence[str] = ()) -> str:
        """`docker compose exec web python manage.py ...`, as an operator runs it."""
        options = [arg for pair in env for arg in ("-e", pair)]
        done = self.compose(
            "exec", "-T", *options, "web", "python", "manage.py", *args, input=input
        )
        return done.stdout

    def containers(self, service: str | None = None) -> list[dict[str, Any]]:
        """`docker inspect` of the project's containers (of one service), by replica number."""
        filters = ["--filter", f"label=com.docker.compose.project={PROJECT}"]
        if service:
            filters += ["--filter", f"label=com.docker.compose.service={service}"]
        ids = _docker("ps", "--all", "--quiet", *filters).split()
        if not ids:
            return []
        inspected: list[dict[str, Any]] = json.loads(_docker("inspect", *ids))
        return sorted(
            inspected,
            key=lambda c: (
                c["Config"]["Labels"]["com.docker.compose.service"],
                int(c["Config"]["Labels"].get("com.docker.compose.container-number", "0")),
            ),
        )

    def published(self, service: str, port: int) -> str:
        line = self.compose("port", service, str(port)).stdout.strip().splitlines()[0]
        return f"http://127.0.0.1:{line.rpartition(':')[2]}"


def _docker(*args: str) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr}"
    return done.stdout


def _service(container: dict[str, Any]) -> str:
    return str(container["Config"]["Labels"]["com.docker.compose.service"])


def _state(container: dict[str, Any]) -> str:
    state = container["State"]
    health = (state.get("Health") or {}).get("Status")
    return f"{state['Status']}/{health}" if health else str(state["Status"])


def _wait_until_healthy(stack: Stack) -> None:
    """Every service healthy by its own health check, migrate exited 0; fail at once on an exit."""
    deadline = time.monotonic() + HEALTHY_WITHIN_SECONDS
    while True:
        containers = stack.containers()
        states = {f"{_service(c)}#{c['Name']}": _state(c) for c in containers}
        migrate = [c for c in containers if _service(c) == "migrate"]
        assert all(
            c["State"]["Status"] != "exited" or c["State"]["ExitCode"] == 0 for c in migrate
        ), f"migrate failed:\n{stack.compose('logs', '--no-color', 'migrate').stdout[-4000:]}"
        for container in containers:
            if _service(container) != "migrate" and container["State"]["Status"] in (
                "exited",
                "dead",
            ):
                name = _service(container)
                logs = stack.compose("logs", "--no-color", "--tail=60", name, check=False).stdout
                pytest.fail(f"{name} exited ({_state(container)}):\n{logs}")
        counts = {
            service: sum(
                1 for c in containers if _service(c) == service and _state(c) == "running/healthy"
            )
            for service in SERVICES
        }
        migrated = bool(migrate) and all(
            c["State"]["Status"] == "exited" and c["State"]["ExitCode"] == 0 for c in migrate
        )
        if migrated and counts == SERVICES:
            return
        if time.monotonic() > deadline:
            pytest.fail(
                f"not healthy within {HEALTHY_WITHIN_SECONDS} s: {counts} of {SERVICES};\n"
                + "\n".join(f"  {name}: {state}" for name, state in sorted(states.items()))
            )
        time.sleep(3)


PROXY_CONFIG = ROOT / "deploy" / "haproxy" / "docker-socket-proxy.cfg"
# Inserted after the production configuration's `bind` line (tests/stack/compose.yml says why).
ENGINE_SEEN_EMPTY = """\
    # The stack test: an engine shared with other work looks empty to these workers.
    acl listing path,url_dec -m reg ^(/v[0-9.]+)?/(containers/json|networks|images/json)$
    http-request return status 200 content-type application/json string "[]" if METH_GET listing
"""


def _test_proxy_config() -> str:
    production = PROXY_CONFIG.read_text()
    bind = "    bind :2375\n"
    assert production.count(bind) == 1
    return production.replace(bind, bind + ENGINE_SEEN_EMPTY)


def _save_logs(stack: Stack) -> None:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    logs = stack.compose("logs", "--no-color", "--timestamps", check=False, timeout=120)
    (LOG_DIR / "compose.log").write_text(logs.stdout + logs.stderr)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    for image in [*_local_image_names(), os.environ.get("TOOLROOM_IMAGE", "toolroom:local")]:
        if subprocess.run(
            ["docker", "image", "inspect", image], capture_output=True, timeout=60, check=False
        ).returncode:
            pytest.fail(
                f"the image {image} is missing: `make images` builds it (make stack-test does)"
            )
    secrets = subprocess.run(
        ["bash", "scripts/compose-secrets"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert secrets.returncode == 0, secrets.stderr
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / "docker-socket-proxy.cfg").write_text(_test_proxy_config())
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "TOOLROOM_HOSTNAME": HOSTNAME,
        # Published on loopback at ports the engine picks: nothing fixed, nothing shared.
        "TOOLROOM_PORT": "0",
        "TOOLROOM_GATEWAY_PORT": "0",
        "TOOLROOM_GATEWAY_REPLICAS": str(SERVICES["gateway"]),
    }
    if "DOCKER_HOST" in os.environ:
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    running = Stack(cli=_compose_cli(), env=env)
    # From nothing: whatever an interrupted run left (containers, volumes) goes first.
    running.compose("down", "--volumes", "--remove-orphans", "--timeout", "5")
    try:
        running.compose("up", "--detach", "--no-build", timeout=900)
        _wait_until_healthy(running)
        running.web = running.published("web", 8000)
        running.gateway = running.published("gateway-lb", 8001)
        yield running
    finally:
        _save_logs(running)
        if not os.environ.get("TOOLROOM_STACK_KEEP"):
            running.compose("down", "--volumes", "--remove-orphans", "--timeout", "10", check=False)


def _local_image_names() -> list[str]:
    return [
        line.split("=", 1)[1].strip()
        for line in LOCAL_IMAGES.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


@pytest.fixture(scope="module")
def agent_token(stack: Stack) -> str:
    """What an operator does after `up`: a superuser, then import, discover, approve, grant,
    token, each through manage.py in the web container."""
    stack.manage(
        "createsuperuser", "--no-input", "--username=admin", f"--email=admin@{HOSTNAME}",
        env=["DJANGO_SUPERUSER_PASSWORD=stack-test-admin-password"],
    )  # fmt: skip
    imported = stack.manage("import_servers", "-", "--tier=builtin", input=json.dumps(MCP_JSON))
    assert SERVER_SLUG in imported, imported
    stack.manage("mcp", "discover", SERVER_SLUG, "--timeout=240")
    stack.manage("mcp", "approve", SERVER_SLUG, "--note=stack test")
    stack.manage("mcp", "approve-tools", SERVER_SLUG, "--all")
    # Kept warm, one session for every caller (the echo server keeps no per-caller state), and
    # a deadline with room for a loaded two-core machine: what the admin's gateway policy form
    # sets, here through the same service from manage.py's shell.
    stack.manage("shell", "-c", GATEWAY_POLICY)
    stack.manage("mcp", "start", SERVER_SLUG)
    deadline = time.monotonic() + 180
    while not re.search(rf"^{SERVER_SLUG}\s.*\brunning\b", stack.manage("mcp", "status"), re.M):
        assert time.monotonic() < deadline, stack.manage("mcp", "status")
        time.sleep(2)
    stack.manage("create_team", "stack-team", "--name=Stack team")
    stack.manage("grant", "--team=stack-team", f"--server={SERVER_SLUG}")
    token = stack.manage(
        "create_agent_token", "--team=stack-team", "--role=operations", "--name=stack-agent"
    ).strip()
    assert token.startswith("trm_"), token
    return token


GATEWAY_POLICY = f"""
from registry.gateway.services import server_gateway_policy_set
from registry.servers.models import McpServer
server_gateway_policy_set(
    actor="cli:stack-test", server=McpServer.objects.get(slug="{SERVER_SLUG}"),
    mode="always_warm", isolation_scope="shared", call_deadline_seconds=30.0,
)
"""


def _agent_client(stack: Stack, http: httpx2.AsyncClient, mode: str = "2026-07-28") -> Client:
    return Client(streamable_http_client(f"{stack.gateway}/mcp", http_client=http), mode=mode)


def _http(token: str) -> httpx2.AsyncClient:
    # The TLS-terminating proxy in front would set the host and scheme; the test is that proxy.
    return httpx2.AsyncClient(
        headers={
            "Authorization": f"Bearer {token}",
            "Host": HOSTNAME,
            "X-Forwarded-Proto": "https",
        },
        timeout=httpx2.Timeout(60.0),
    )


def _text(result: Any) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


async def _echo(client: Client, text: str) -> str:
    result = await client.call_tool(TOOL, {"text": text})
    assert not result.is_error, _text(result)
    return _text(result)


def _mcp_posts(container_id: str) -> int:
    """How many MCP requests one gateway replica answered (its uvicorn access log)."""
    logs = subprocess.run(
        ["docker", "logs", container_id], capture_output=True, text=True, timeout=60, check=False
    )
    return len(re.findall(r'"POST /mcp HTTP/1\.1" 200', logs.stdout + logs.stderr))


# --- The tests, in the order an operator meets them ---------------------------------------------


def test_every_service_comes_up_healthy_by_its_own_health_check(stack):
    containers = stack.containers()
    for service, count in SERVICES.items():
        states = [_state(c) for c in containers if _service(c) == service]
        assert states == ["running/healthy"] * count, (service, states)
    readiness = httpx2.get(
        f"{stack.web}/readyz",
        headers={"Host": HOSTNAME, "X-Forwarded-Proto": "https"},
        timeout=30,
    )
    assert readiness.status_code == 200, readiness.text
    components = readiness.json()["components"]
    for name in ("database", "cache", "broker", "workers", "beat", "docker"):
        assert components[name]["status"] == "ok", (name, components[name])


ENGINE_PROBE = """
import json, urllib.error, urllib.request

def status(method, path):
    request = urllib.request.Request(
        "http://docker-socket-proxy:2375" + path, method=method,
        data=b"{}" if method == "POST" else None, headers={"Content-Type": "application/json"})
    try:
        return urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as error:
        return error.code

print(json.dumps({f"{method} {path}": status(method, path) for method, path in [
    ("GET", "/_ping"), ("GET", "/v1.41/version"), ("GET", "/v1.41/containers/json"),
    ("GET", "/v1.41/images/json"), ("GET", "/v1.41/networks"),
    ("POST", "/v1.41/containers/no-such-container/exec"),
    ("POST", "/v1.41/exec/no-such-exec/start"),
    ("GET", "/v1.41/volumes"), ("GET", "/v1.41/info"), ("GET", "/v1.41/secrets"),
    ("GET", "/v1.41/swarm"), ("GET", "/v1.41/plugins"),
]}))
"""


def test_the_workers_reach_the_engine_only_through_the_calls_the_proxy_allows(stack):
    answers = json.loads(
        stack.compose("exec", "-T", "worker", "python", "-c", ENGINE_PROBE).stdout.splitlines()[-1]
    )

    # The proxy runs the production rules; the test's only addition answers three list calls.
    mounted = stack.compose(
        "exec", "-T", "docker-socket-proxy", "cat", "/usr/local/etc/haproxy/haproxy.cfg"
    ).stdout
    assert mounted == _test_proxy_config()
    assert mounted.replace(ENGINE_SEEN_EMPTY, "") == PROXY_CONFIG.read_text()
    assert answers == {
        "GET /_ping": 200,
        "GET /v1.41/version": 200,
        "GET /v1.41/containers/json": 200,
        "GET /v1.41/images/json": 200,
        "GET /v1.41/networks": 200,
        # Refused by the proxy (403); the engine itself would answer 404 for these ids.
        "POST /v1.41/containers/no-such-container/exec": 403,
        "POST /v1.41/exec/no-such-exec/start": 403,
        "GET /v1.41/volumes": 403,
        "GET /v1.41/info": 403,
        "GET /v1.41/secrets": 403,
        "GET /v1.41/swarm": 403,
        "GET /v1.41/plugins": 403,
    }
    # web is not on the engine's network: the proxy's name does not even resolve there.
    lookup = stack.compose(
        "exec", "-T", "web", "python", "-c",
        "import socket; socket.getaddrinfo('docker-socket-proxy', 2375)",
        check=False,
    )  # fmt: skip
    assert lookup.returncode != 0
    assert "gaierror" in lookup.stderr + lookup.stdout


def test_the_superuser_signs_in_to_the_admin_over_http(stack, agent_token):
    base = {"Host": HOSTNAME, "X-Forwarded-Proto": "https"}
    # The production profile sets Secure cookies, which a client keeps only for https: this
    # client carries them by hand, as the browser behind the TLS proxy would.
    with httpx2.Client(base_url=stack.web, headers=base, timeout=30) as web:
        form = web.get("/admin/login/")
        assert form.status_code == 200
        csrf = form.cookies["csrftoken"]
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert token is not None
        signed_in = web.post(
            "/admin/login/?next=/admin/",
            data={
                "username": "admin",
                "password": "stack-test-admin-password",
                "csrfmiddlewaretoken": token.group(1),
            },
            headers={
                "Cookie": f"csrftoken={csrf}",
                "Referer": f"https://{HOSTNAME}/admin/login/",
                "Origin": f"https://{HOSTNAME}",
            },
        )
        assert signed_in.status_code == 302, signed_in.text[:2000]
        assert signed_in.headers["location"] == "/admin/"
        session = signed_in.cookies["sessionid"]
        admin = web.get("/admin/", headers={"Cookie": f"sessionid={session}"})
        assert admin.status_code == 200
        assert (
            SERVER_SLUG
            in web.get("/admin/servers/mcpserver/", headers={"Cookie": f"sessionid={session}"}).text
        )


def test_an_agent_calls_a_tool_through_the_gateway_with_the_sdk_client(stack, agent_token):
    async def run() -> tuple[list[str], str]:
        async with _http(agent_token) as http, _agent_client(stack, http) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            return tools, await _echo(client, "hello from the stack")

    tools, answer = anyio.run(run)

    assert sorted(tools) == [f"{SERVER_SLUG}__add", TOOL, f"{SERVER_SLUG}__sleep"]
    assert answer == "hello from the stack"


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
def test_calls_spread_over_both_gateway_replicas_without_stickiness(stack, agent_token, mode):
    replicas = [c["Id"] for c in stack.containers("gateway")]
    before = [_mcp_posts(replica) for replica in replicas]

    async def run() -> list[str]:
        # legacy: one handshake session whose requests both replicas serve (its record in Redis).
        async with _http(agent_token) as http, _agent_client(stack, http, mode) as client:
            return [await _echo(client, f"call {n}") for n in range(20)]

    answers = anyio.run(run)

    assert answers == [f"call {n}" for n in range(20)]
    served = [_mcp_posts(replica) - seen for replica, seen in zip(replicas, before, strict=True)]
    assert len(served) == 2
    assert all(count >= 5 for count in served), served


def test_calls_continue_when_one_gateway_replica_is_stopped(stack, agent_token):
    """A 2026-07-28 client and a handshake session, both opened before the stop, call on."""
    first, second = (c["Id"] for c in stack.containers("gateway"))
    answers: dict[str, list[str]] = {"2026-07-28": [], "legacy": []}
    stopped_after: dict[str, int] = {}

    async def run() -> None:
        done = anyio.Event()
        async with (
            _http(agent_token) as http,
            _agent_client(stack, http) as modern,
            _agent_client(stack, http, "legacy") as legacy,
        ):

            async def calls(client: Client, found: list[str]) -> None:
                while not done.is_set():
                    found.append(await _echo(client, f"call {len(found)}"))

            async with anyio.create_task_group() as group:
                group.start_soon(calls, modern, answers["2026-07-28"])
                group.start_soon(calls, legacy, answers["legacy"])
                while min(len(found) for found in answers.values()) < 10:
                    await anyio.sleep(0.01)
                # Stopped while calls keep coming (SIGTERM: uvicorn finishes what it has in
                # flight; the balancer takes the replica out after its health check fails).
                await anyio.to_thread.run_sync(lambda: _docker("stop", "--time=10", first))
                stopped_after.update({mode: len(found) for mode, found in answers.items()})
                while any(len(answers[mode]) < stopped_after[mode] + 30 for mode in answers):
                    await anyio.sleep(0.01)
                done.set()

    anyio.run(run)

    for found in answers.values():
        assert found == [f"call {n}" for n in range(len(found))]
    assert stack.containers("gateway")[0]["State"]["Status"] == "exited"
    served_by_second = _mcp_posts(second)
    assert served_by_second > 0

    # The calls after the stop went to the replica still running.
    async def more() -> list[str]:
        async with _http(agent_token) as http, _agent_client(stack, http) as client:
            return [await _echo(client, f"later {n}") for n in range(10)]

    assert anyio.run(more) == [f"later {n}" for n in range(10)]
    assert _mcp_posts(second) >= served_by_second + 10
