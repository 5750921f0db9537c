"""A real HAProxy (Debian's `haproxy` package) in front of gateway processes on this machine:
round robin, no stickiness, the timeouts, retries and health check of deploy/haproxy/gateway.cfg.
Used by the replica tests and by bench/gateway/replicas.py; its stats say which replica answered
how many requests."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx2

from tests.mcp_fixtures import free_port, wait_for_port

CONFIG = """\
global
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 10m
    timeout server 10m
    timeout http-request 30s
    timeout http-keep-alive 30s
    timeout check {check_timeout}
    retries 3
    option redispatch 1

frontend mcp
    bind 127.0.0.1:{port}
    default_backend gateways

frontend stats
    bind 127.0.0.1:{stats_port}
    stats enable
    stats uri /stats
    stats refresh 1h

backend gateways
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    default-server inter 2s fall 2 rise 1
{servers}
"""


class LoadBalancer:
    """`haproxy -f <config>` balancing over `ports` (127.0.0.1); `check_timeout`: how long a
    health check may take (deploy/haproxy/gateway.cfg: 2s)."""

    def __init__(self, ports: list[int], folder: Path, *, check_timeout: str = "2s") -> None:
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        self.port = free_port()
        self.stats_port = free_port()
        servers = "\n".join(
            f"    server gateway{index} 127.0.0.1:{port} check"
            for index, port in enumerate(ports, 1)
        )
        config = folder / "haproxy.cfg"
        config.write_text(
            CONFIG.format(
                port=self.port,
                stats_port=self.stats_port,
                servers=servers,
                check_timeout=check_timeout,
            )
        )
        self.log = folder / "haproxy.log"
        with self.log.open("a") as output:
            self.process = subprocess.Popen(
                [binary, "-db", "-f", str(config)], stdout=output, stderr=subprocess.STDOUT
            )
        wait_for_port(self.port, timeout=20)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per server of the backend: HAProxy's stats row (`hrsp_2xx`, `status`, ...)."""
        answer = httpx2.get(
            f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=5, trust_env=False
        )
        rows = csv.DictReader(io.StringIO(answer.text.lstrip("# ")))
        return {
            row["svname"]: row
            for row in rows
            if row["pxname"] == "gateways" and row["svname"] not in {"FRONTEND", "BACKEND"}
        }

    def answered(self) -> dict[str, int]:
        """2xx answers per replica so far."""
        return {name: int(row["hrsp_2xx"] or 0) for name, row in self.stats().items()}

    def wait_up(self, count: int, timeout: float = 20.0) -> None:
        """Until `count` replicas pass the health check."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(row["status"] == "UP" for row in self.stats().values()) >= count:
                return
            time.sleep(0.2)
        raise RuntimeError(f"fewer than {count} replicas up behind HAProxy: {self.stats()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
