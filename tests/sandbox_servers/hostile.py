"""A hostile MCP server: honest tools (echo, add) beside tools that try to break out of a sandbox.

Each attack tool reports what happened instead of raising, so that a test sees the exact failure
(errno, timeout, OOM) the sandbox caused. With HOSTILE_IGNORE_STDIN_EOF=1 the process outlives the
end of its stdin, as a server that ignores the MCP shutdown would.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from mcp.server.mcpserver import MCPServer

server = MCPServer("hostile")


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def whoami() -> dict[str, str]:
    """Who the server runs as, and what the kernel lets it do."""
    with open("/proc/self/status") as handle:
        status = dict(line.split(":", 1) for line in handle.read().splitlines() if ":" in line)
    return {
        "uid": str(os.getuid()),
        "euid": str(os.geteuid()),
        "gid": str(os.getgid()),
        "cap_eff": status["CapEff"].strip(),
        "cap_bnd": status["CapBnd"].strip(),
        "no_new_privs": status["NoNewPrivs"].strip(),
        "seccomp": status["Seccomp"].strip(),
        "interfaces": ",".join(sorted(name for _, name in socket.if_nameindex())),
    }


@server.tool()
def fill(path: str, megabytes: int) -> str:
    """Write `megabytes` MiB to `path`, one MiB at a time; say how far it got."""
    written = 0
    try:
        with open(path, "wb") as handle:
            for _ in range(megabytes):
                handle.write(b"\0" * 1048576)
                handle.flush()
                written += 1
    except OSError as exc:
        return f"{written} MiB, then {_failure(exc)}"
    return f"{written} MiB"


@server.tool()
def listing(path: str) -> list[str]:
    """The names under `path`, recursively, with their sizes."""
    found = []
    for folder, _, names in os.walk(path):
        for name in names:
            full = os.path.join(folder, name)
            found.append(f"{os.path.relpath(full, path)} {os.path.getsize(full)}")
    return sorted(found)


@server.tool()
def write_root() -> str:
    """Try to write a file at the root of the filesystem."""
    try:
        with open("/pwned", "w") as handle:
            handle.write("owned")
    except OSError as exc:
        return _failure(exc)
    return "wrote /pwned"


@server.tool()
def exec_from_tmp() -> str:
    """Write a program into /tmp and try to run it."""
    path = "/tmp/payload"
    try:
        with open("/bin/true", "rb") as source, open(path, "wb") as target:
            target.write(source.read())
        os.chmod(path, 0o755)  # noqa: S103 - the attack needs an executable
        subprocess.run([path], check=True)
    except OSError as exc:
        return _failure(exc)
    return "ran a program from /tmp"


@server.tool()
def fork_bomb(limit: int = 100000) -> str:
    """Fork until the kernel refuses, then clean up; report how far it got."""
    children: list[int] = []
    outcome = f"forked {limit} processes without being stopped"
    try:
        for _ in range(limit):
            pid = os.fork()
            if pid == 0:
                # A small process per fork: the process limit, not memory, is what must stop it.
                try:
                    os.execv("/usr/bin/sleep", ["sleep", "60"])  # noqa: S606
                finally:
                    os._exit(1)
            children.append(pid)
    except OSError as exc:
        outcome = f"fork failed after {len(children)} processes: {_failure(exc)}"
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        for pid in children:
            os.waitpid(pid, 0)
    return outcome


@server.tool()
def hog(megabytes: int = 1024) -> str:
    """Allocate and touch memory, 16 MB at a time."""
    held = []
    for _ in range(megabytes // 16):
        held.append(b"x" * (16 * 1024 * 1024))
    return f"allocated {len(held) * 16} MB"


@server.tool()
def connect(host: str, port: int, timeout: float = 2.0) -> str:
    """Open a TCP connection."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return f"connected to {host}:{port}"
    except OSError as exc:
        return _failure(exc)


@server.tool()
def resolve(name: str) -> str:
    """Look a name up."""
    try:
        return ",".join(sorted({str(info[4][0]) for info in socket.getaddrinfo(name, 80)}))
    except OSError as exc:
        return _failure(exc)


@server.tool()
def docker_socket() -> str:
    """Try the Docker engine's socket."""
    outcomes = []
    for path in ("/var/run/docker.sock", "/run/docker.sock"):
        try:
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(path)
            client.sendall(b"GET /version HTTP/1.0\r\n\r\n")
            outcomes.append(f"{path}: {client.recv(200)!r}")
        except OSError as exc:
            outcomes.append(f"{path}: {_failure(exc)}")
    return "; ".join(outcomes)


@server.tool()
def setuid_escalate() -> str:
    """Run setuid-root programs planted in the image: read /etc/shadow, report the euid."""
    shadow = subprocess.run(
        ["/usr/local/bin/suid-cat", "/etc/shadow"], capture_output=True, text=True, check=False
    )
    euid = subprocess.run(
        ["/usr/local/bin/suid-python", "-c", "import os; print(os.geteuid())"],
        capture_output=True,
        text=True,
        check=False,
    )
    return (
        f"suid-cat exit {shadow.returncode}: {shadow.stderr.strip() or shadow.stdout[:40]}; "
        f"suid-python euid {euid.stdout.strip()}"
    )


@server.tool()
def http_get(url: str, timeout: float = 5.0) -> str:
    """Fetch a URL with the standard library (which honours HTTP_PROXY)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
            return f"{response.status} {response.read(200).decode(errors='replace')}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read(200).decode(errors='replace').strip()}"
    except OSError as exc:
        return _failure(exc)


def _wire_fd() -> int:
    """The fd the SDK serves JSON-RPC on: it moves stdout to a private descriptor and points
    fd 1 at stderr, so a stray print cannot corrupt the protocol. Find the pipe it kept."""
    diverted = os.readlink("/proc/self/fd/2")
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            writable = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
            if fd > 2 and writable and target.startswith("pipe:") and target != diverted:
                return fd
    return 1


@server.tool()
def garbage() -> str:
    """Write a line that is not JSON-RPC on the protocol stream, then answer normally."""
    os.write(_wire_fd(), b"this is not json-rpc\n")
    return "sent garbage"


@server.tool()
def shout(lines: int = 3) -> str:
    """Write lines on stderr."""
    for number in range(lines):
        print(f"stderr line {number}", file=sys.stderr, flush=True)
    return f"wrote {lines} lines"


@server.tool()
def nap(seconds: float = 30.0) -> str:
    """Sleep, holding the call open."""
    time.sleep(seconds)
    return f"slept {seconds} s"


@server.tool()
def crash(code: int = 3) -> str:
    """Exit at once with `code`."""
    print(f"crashing with exit code {code}", file=sys.stderr, flush=True)
    os._exit(code)


if __name__ == "__main__":
    server.run()
    if os.environ.get("HOSTILE_IGNORE_STDIN_EOF") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)
