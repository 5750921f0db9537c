"""`make run`: prepare the quickstart (database, demo data, admin) and supervise its processes.

scripts/run-quickstart sets up the virtual environment and then runs this with its Python. The
processes to keep running are listed in `quickstart_processes`: the web server now; the Celery
worker and beat join it there. Each child runs in its own process group, so Ctrl-C (SIGINT),
SIGTERM or SIGHUP reach this supervisor only; it then stops every child (and whatever the child
started) with SIGTERM, waits, and kills what is left. If one child dies, the others are stopped
too: a half-running Toolroom is worse than a stopped one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
STOP_TIMEOUT_SECONDS = 10.0
READY_TIMEOUT_SECONDS = 60.0
POLL_SECONDS = 0.2
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


@dataclass(frozen=True)
class ChildSpec:
    name: str
    argv: list[str]
    # A job that finishes on its own (e.g. building images): its exit stops nothing else.
    oneshot: bool = False


@dataclass
class Child:
    spec: ChildSpec
    process: subprocess.Popen[bytes]


def quickstart_processes(*, port: int) -> list[ChildSpec]:
    """What `make run` keeps running, in start order (stopped in reverse).

    Without REDIS_URL the worker and beat use the embedded broker (files under var/broker):
    real processes, no service to install. One worker takes all three queues with the threads pool,
    so it also holds the warm runtimes.
    """
    # --no-proxy-headers: the client's address is the socket's (uvicorn would otherwise take it
    # from an X-Forwarded-For that any local client can write); registry/core/client_address.py.
    web = [PYTHON, "-m", "uvicorn", "registry.asgi:application", "--no-proxy-headers"]
    web += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    web += ["--http", "registry.core.http_protocol:NoDelayHTTPProtocol"]  # TCP_NODELAY, always
    # The gateway (docs/gateway.md): its own ASGI process on the next port.
    gateway = [PYTHON, "-m", "uvicorn", "workers.gateway.asgi:application", "--no-proxy-headers"]
    gateway += ["--host", "127.0.0.1", "--port", str(port + 1), "--log-level", "warning"]
    celery = [PYTHON, "-m", "celery", "-A", "workers", "--quiet"]
    worker = [
        *celery,
        "worker",
        "-Q",
        "toolroom,discovery,runtime",
        "-P",
        "threads",
        "-c",
        "8",
        "-n",
        "quickstart@%h",
        "--without-gossip",
        "--without-mingle",
        "-l",
        "warning",
    ]
    beat = [
        *celery,
        "beat",
        "-l",
        "warning",
        "--schedule",
        str(ROOT / "var" / "celerybeat-schedule"),
    ]
    return [
        ChildSpec("web", web),
        ChildSpec("gateway", gateway),
        ChildSpec("worker", worker),
        ChildSpec("beat", beat),
    ]


def quickstart_background_jobs() -> list[ChildSpec]:
    """Jobs `make run` starts next to the processes and lets finish: the sandbox's base images
    are built where an engine answers and they are missing (progress in this log and on the
    Fleet status page), then the demo's sandboxed servers are discovered."""
    return [ChildSpec("sandbox", [PYTHON, "manage.py", "sandbox", "prepare"], oneshot=True)]


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGTERM if the supervisor itself is killed.

    A safety net for `kill -9` of the supervisor; the normal stop path is `Supervisor.stop`.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Supervisor:
    specs: Sequence[ChildSpec]
    env: dict[str, str]
    stop_timeout: float = STOP_TIMEOUT_SECONDS
    children: list[Child] = field(default_factory=list)
    stop_requested_by: int | None = None

    def _request_stop(self, signum: int, _frame: FrameType | None) -> None:
        if self.stop_requested_by is None:
            self.stop_requested_by = signum

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._request_stop)

    def start(self) -> None:
        for spec in self.specs:
            # The supervisor runs no threads, so preexec_fn is safe here.
            process = subprocess.Popen(
                spec.argv,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                process_group=0,
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
            self.children.append(Child(spec, process))

    def exited_child(self) -> Child | None:
        for child in self.children:
            if not child.spec.oneshot and child.process.poll() is not None:
                return child
        return None

    def run(self, *, on_tick: Callable[[], None] | None = None) -> int:
        """Wait for a stop request or a child's exit, stop everything, return the exit code."""
        self.install_signal_handlers()
        try:
            if self.stop_requested_by is None:
                self.start()
            while self.stop_requested_by is None:
                dead = self.exited_child()
                if dead is not None:
                    print(
                        f"{dead.spec.name} stopped unexpectedly (exit code "
                        f"{dead.process.returncode}); stopping the rest.",
                        file=sys.stderr,
                        flush=True,
                    )
                    return 1
                if on_tick is not None:
                    on_tick()
                time.sleep(POLL_SECONDS)
            return 0
        finally:
            self.stop()

    def stop(self) -> None:
        running = [child for child in self.children if child.process.poll() is None]
        for child in reversed(running):
            _signal_group(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for child in reversed(self.children):
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(
                    f"{child.spec.name} did not stop within {self.stop_timeout:.0f} s; killing it.",
                    file=sys.stderr,
                    flush=True,
                )
                _signal_group(child.process.pid, signal.SIGKILL)
                child.process.wait()
            # Whatever the child started in its group and left behind goes with it.
            _signal_group(child.process.pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


# --- Preparing the quickstart --------------------------------------------------------------------


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _manage(env: dict[str, str], *args: str, capture: bool = False) -> str:
    command = [PYTHON, "manage.py", *args]
    result = subprocess.run(
        command,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else None,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(
            f"`python manage.py {' '.join(args)}` failed (exit code {result.returncode}); "
            "its message is above."
        )
    return result.stdout or ""


def _discover_demo(env: dict[str, str]) -> None:
    """Discover the demo's local servers now, so their tools are there at the first look.

    The worker would do it within a minute; a failure here is reported, not fatal.
    """
    command = [PYTHON, "manage.py", "mcp", "discover", "time", "git", "--inline"]
    result = subprocess.run(
        command,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        print("Discovering the demo servers failed; the worker will try again:", file=sys.stderr)
        print((result.stdout + result.stderr).strip()[-2000:], file=sys.stderr, flush=True)


def _shown(path: Path) -> Path:
    """A path relative to the repository where it is inside it."""
    try:
        return path.resolve().relative_to(ROOT)
    except ValueError:
        return path


def _database_label(env: dict[str, str]) -> str:
    if env.get("DATABASE_URL") or env.get("DATABASE_URL_FILE"):
        return "the database DATABASE_URL names"
    data_dir = Path(env.get("TOOLROOM_DATA_DIR") or ROOT / "var")
    try:
        shown = data_dir.resolve().relative_to(ROOT)
    except ValueError:
        shown = data_dir
    return f"SQLite in {shown}/"


class ReadinessProbe:
    """Polls the admin's login page until it answers, then prints where to open Toolroom."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/admin/"
        self.login_url = f"http://127.0.0.1:{port}/admin/login/"
        self.deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        status: int | None = None
        try:
            with urllib.request.urlopen(self.login_url, timeout=2) as response:  # noqa: S310
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except (urllib.error.URLError, OSError):
            if time.monotonic() > self.deadline:
                self.done = True
                print(
                    f"The web server has not answered on {self.login_url} for "
                    f"{READY_TIMEOUT_SECONDS:.0f} s; still waiting (Ctrl-C stops it).",
                    file=sys.stderr,
                    flush=True,
                )
            return
        self.done = True
        if status != 200:
            print(
                f"Warning: {self.login_url} answered HTTP {status}; see the log above.",
                file=sys.stderr,
                flush=True,
            )
        print(f"\nToolroom is running: open {self.url}  (Ctrl-C stops it)", flush=True)


def main() -> int:
    port_text = os.environ.get("PORT") or "8000"
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        print(f"PORT={port_text} is not a TCP port number.", file=sys.stderr)
        return 2
    port = int(port_text)
    for taken in (port, port + 1):  # the web app, and the gateway beside it
        if not _port_free(taken):
            print(
                f"Port {taken} on 127.0.0.1 is already in use (another Toolroom?). "
                f"Use another one: make run PORT={port + 2}",
                file=sys.stderr,
            )
            return 1

    env = dict(os.environ)
    env["TOOLROOM_PROFILE"] = "quickstart"
    env["PORT"] = str(port)
    # The URLs agents are given (mcp.json, /v0.1/servers) name the port Toolroom serves on.
    env.setdefault("TOOLROOM_PUBLIC_URL", f"http://127.0.0.1:{port}")
    env.setdefault("TOOLROOM_GATEWAY_URL", f"http://127.0.0.1:{port + 1}/mcp")
    env.setdefault("TOOLROOM_GATEWAY_INTERNAL_URL", f"http://127.0.0.1:{port + 1}")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # whitenoise serves static files through a synchronous iterator, which Django's ASGI handler
    # warns about once per process; it is harmless here and only clutters the console.
    env.setdefault(
        "PYTHONWARNINGS", "ignore:StreamingHttpResponse must consume synchronous iterators"
    )

    print(f"Preparing the database ({_database_label(env)}) and demo data...", flush=True)
    _manage(env, "migrate", "--no-input", "--verbosity", "0")
    _manage(env, "load_demo")
    _discover_demo(env)
    _manage(env, "load_demo", "--approve-read-tools")
    _manage(env, "quickstart_admin", "--url", f"http://127.0.0.1:{port}/admin/")
    token = _manage(env, "load_demo_teams", capture=True).strip()
    base = f"http://127.0.0.1:{port}"
    _manage(env, "quickstart_member", "--url", f"{base}/portal/")
    token_file = _shown(Path(env.get("TOOLROOM_DATA_DIR") or ROOT / "var") / "demo-agent-token")
    print(
        f"The demo agent's token (team 'demo', role 'operations'; kept in {token_file}):\n"
        f"  {token}\n"
        "Its catalogue:\n"
        f'  curl -H "Authorization: Bearer $(cat {token_file})" {base}/api/v1/catalogue\n'
        f"API docs: {base}/api/docs/\n"
        f"The team's MCP endpoint (the gateway): http://127.0.0.1:{port + 1}/mcp",
        flush=True,
    )

    print(f"Starting Toolroom on http://127.0.0.1:{port}/ ...", flush=True)
    supervisor = Supervisor([*quickstart_processes(port=port), *quickstart_background_jobs()], env)
    code = supervisor.run(on_tick=ReadinessProbe(port))
    if supervisor.stop_requested_by is not None:
        print("Toolroom stopped.", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
