"""Fixtures that start real MCP servers for the tests: scenario servers over stdio and HTTP."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SCENARIO_SERVER = str(Path(__file__).parent / "mcp_servers" / "scenario_server.py")
SAMPLING_SERVER = str(Path(__file__).parent / "mcp_servers" / "sampling_server.py")


def scenario_argv(*flags: str, script: str = SCENARIO_SERVER) -> list[str]:
    return [sys.executable, script, *flags]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_pair() -> int:
    """A free port P whose neighbour P+1 is free too: `make run` serves the gateway on PORT+1."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two neighbouring free ports found")


def wait_for_port(port: int, *, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class RunningServer:
    def __init__(self, process: subprocess.Popen[bytes], url: str) -> None:
        self.process = process
        self.url = url

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_http_scenario(
    *flags: str, sse: bool = False, port: int | None = None, script: str = SCENARIO_SERVER
) -> RunningServer:
    port = port or free_port()
    process = subprocess.Popen(
        scenario_argv("--sse" if sse else "--http", str(port), *flags, script=script),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
    except RuntimeError:
        process.kill()
        process.wait()
        raise
    path = "/sse" if sse else "/mcp"
    return RunningServer(process, f"http://127.0.0.1:{port}{path}")


@pytest.fixture(scope="session")
def http_scenario_server() -> Iterator[RunningServer]:
    server = start_http_scenario()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def sse_scenario_server() -> Iterator[RunningServer]:
    server = start_http_scenario(sse=True)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def server_everything():
    """The reference npm server (TypeScript SDK 1.x, protocol 2025-11-25), installed once."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("Node.js and npm are needed for the npm reference server (CI has Node 20).")
    prefix = Path(__file__).resolve().parent.parent / "var" / "test-npm"
    entry = prefix / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
    if not entry.exists():
        subprocess.run(
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(prefix),
                "@modelcontextprotocol/server-everything@2026.8.31",
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return ["node", str(entry), "stdio"]


@pytest.fixture
def http_server_everything(server_everything: list[str]) -> Iterator[RunningServer]:
    """The reference npm server serving Streamable HTTP on a free port of 127.0.0.1."""
    port = free_port()
    entry = server_everything[1]
    process = subprocess.Popen(
        ["node", entry, "streamableHttp"],
        env={"PATH": os.environ["PATH"], "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
    except RuntimeError:
        process.kill()
        process.wait()
        raise
    server = RunningServer(process, f"http://127.0.0.1:{port}/mcp")
    yield server
    server.stop()
