"""What a sandboxed server runs as: the container spec, its checks, the hardening it always gets.

`ContainerSpec` is plain data the domain fills from a server's policy. It refuses what the sandbox
never does (root, the Docker socket or a host root mounted, a shell-unsafe name) when it is made, so
a bad spec fails before any engine is asked. `container_create_kwargs` turns a spec into the exact
arguments of the engine's create call: everything that is not a knob (capabilities, privileges,
init, IPC, logs, the read-only root) is fixed there.
"""

from __future__ import annotations

import os
import posixpath
import re
import socket
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

import docker.types

from workers.adapters.sandbox.errors import SandboxSpecError

NetworkMode = Literal["none", "internal", "proxied", "bridge"]
NETWORK_MODES: tuple[str, ...] = get_args(NetworkMode)

# Labels that mark what Toolroom made, so that the janitor can find it after a worker died.
LABEL_MANAGED = "io.toolroom.managed"
LABEL_OWNER = "io.toolroom.owner"
# The installation (one Toolroom: its database, its workers) a resource belongs to; every
# clean-up filters on it, so installations sharing an engine never touch each other's.
LABEL_INSTALLATION = "io.toolroom.installation"
INSTALLATION_ENV = "TOOLROOM_INSTALLATION"
LABEL_OWNER_HOST = "io.toolroom.owner-host"
LABEL_OWNER_PID = "io.toolroom.owner-pid"
LABEL_SESSION = "io.toolroom.session"
LABEL_SERVER = "io.toolroom.server"
LABEL_RUNTIME = "io.toolroom.runtime"
LABEL_ROLE = "io.toolroom.role"

# Fixed hardening: not knobs, so no policy can loosen them.
LOG_MAX_SIZE = "1m"
LOG_MAX_FILES = "1"
OPEN_FILES_LIMIT = 4096
NOBODY = "65534:65534"
NOBODY_UID = 65534

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_USER = re.compile(r"^(?P<uid>\d{1,10})(?::(?P<gid>\d{1,10}))?$")
_EGRESS = re.compile(
    r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})$"
)
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,499}$")

# The engine's control sockets: mounting one (or a folder holding one) hands over the host.
DOCKER_SOCKETS = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/var/run/containerd",
    "/run/containerd",
    "/var/run/docker",
    "/run/docker",
)
# Host folders never mounted themselves, even read-only.
_FORBIDDEN_SOURCES = frozenset(
    {"/", "/var", "/var/run", "/run", "/etc", "/root", "/home", "/boot", "/usr", "/var/lib"}
)
# Host folders nothing below which is mounted.
_FORBIDDEN_SOURCE_TREES = ("/proc", "/sys", "/dev", "/var/lib/docker", "/var/lib/containerd")
# Container paths a mount may not cover.
_FORBIDDEN_TARGET_TREES = ("/proc", "/sys", "/dev", "/tmp")  # noqa: S108 - in the container


def process_identity(pid: int | None = None) -> str:
    """'<pid>@<start time in clock ticks>': names one process even after its pid is reused."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}@{process_start_time(pid) or 0}"


def process_start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    return stat.rsplit(")", 1)[1].split()[19]


def default_owner() -> str:
    """The owner label of what this process starts: the host's name."""
    return socket.gethostname()


def default_installation() -> str:
    """The installation label of what this process starts and cleans up, unless told: the
    TOOLROOM_INSTALLATION environment variable, else "default" (the workers pass Toolroom's
    setting explicitly, workers/sandboxing.py)."""
    return os.environ.get(INSTALLATION_ENV, "") or "default"


def _under(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


@dataclass(frozen=True)
class HostMount:
    """A host folder or file shown read-only inside the container (always read-only)."""

    source: str
    target: str

    def __post_init__(self) -> None:
        for name, value in (("source", self.source), ("target", self.target)):
            if not value.startswith("/") or "\x00" in value or ".." in value.split("/"):
                raise SandboxSpecError(
                    "mounts", f"Mount {name} {value!r} must be an absolute path without '..'."
                )
        source = posixpath.normpath(self.source)
        self._check_source(source)
        # A symlink may lead somewhere forbidden: check where it really goes on this host.
        try:
            real = os.path.realpath(source, strict=False)
        except OSError as exc:
            raise SandboxSpecError("mounts", f"{self.source} cannot be resolved: {exc}") from exc
        if real != source:
            self._check_source(real)
        target = posixpath.normpath(self.target)
        if target == "/" or any(_under(target, tree) for tree in _FORBIDDEN_TARGET_TREES):
            raise SandboxSpecError(
                "mounts", f"A mount may not cover {target} inside the container."
            )

    def _check_source(self, path: str) -> None:
        sockets = (*DOCKER_SOCKETS, _engine_socket_path())
        if any(_under(path, sock) or _under(sock, path) for sock in sockets):
            raise SandboxSpecError(
                "mounts",
                f"{self.source} is the Docker engine's socket (or holds it); a sandboxed "
                "server never gets the engine: that would hand it the host.",
            )
        if path in _FORBIDDEN_SOURCES or any(
            _under(path, tree) for tree in _FORBIDDEN_SOURCE_TREES
        ):
            raise SandboxSpecError(
                "mounts",
                f"{self.source} is a system folder of the host; mount only the folder the "
                "server needs, read-only.",
            )
        if _is_socket(path):
            raise SandboxSpecError(
                "mounts", f"{self.source} is a socket; sockets are never mounted."
            )


_VOLUME_NAME = re.compile(r"^toolroom-vol-[a-z0-9][a-z0-9_.-]{0,186}$")
# Where storage may not be mounted in the container (its own system, /tmp, the server's code).
_FORBIDDEN_STORAGE_TREES = (
    *_FORBIDDEN_TARGET_TREES,
    *("/etc", "/usr", "/bin", "/sbin", "/lib", "/opt/server"),
)


@dataclass(frozen=True)
class StorageMount:
    """Storage at `target`: the named volume `volume` (Toolroom's, `toolroom-vol-...`), or with
    no volume a scratch tmpfs (kept for the session only). Either holds at most `size_mb`
    (docs/sandbox.md says how that is enforced); a volume over its limit comes `read_only`."""

    target: str
    size_mb: int
    volume: str = ""
    read_only: bool = False

    def __post_init__(self) -> None:
        target = posixpath.normpath(self.target) if self.target.startswith("/") else ""
        if (
            not target
            or target == "/"
            or "\x00" in self.target
            or ".." in self.target.split("/")
            or any(_under(target, tree) for tree in _FORBIDDEN_STORAGE_TREES)
        ):
            raise SandboxSpecError(
                "storage", f"Storage may not be mounted at {self.target!r} in the container."
            )
        if self.volume and not _VOLUME_NAME.match(self.volume):
            raise SandboxSpecError(
                "storage", f"{self.volume!r} is not a Toolroom storage volume name."
            )
        if not 1 <= self.size_mb <= 10_240:
            raise SandboxSpecError("storage", "A storage size must be 1 to 10240 MB.")


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def _engine_socket_path() -> str:
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return posixpath.normpath(host.removeprefix("unix://"))
    return "/var/run/docker.sock"


@dataclass(frozen=True)
class ContainerSpec:
    """One server's container: image, command and the limits its policy gives it.

    `argv` empty means the image's own command. `egress_allowlist` ("host:port") applies to the
    `proxied` network mode only. `owner`, `runtime_id` and `installation` become labels: the
    janitor removes what a dead owner of its own installation left behind.
    """

    server_key: str
    image: str
    argv: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str = ""
    user: str = NOBODY
    memory_mb: int = 256
    cpus: float = 0.5
    pids_limit: int = 128
    network_mode: NetworkMode = "none"
    egress_allowlist: Sequence[str] = ()
    read_only_root: bool = True
    tmpfs_mb: int = 64
    mounts: Sequence[HostMount] = ()
    storage: Sequence[StorageMount] = ()
    owner: str = field(default_factory=default_owner)
    runtime_id: str = ""
    installation: str = field(default_factory=default_installation)

    def __post_init__(self) -> None:
        # Freeze the sequences and mappings handed in, so that the spec stays what was checked.
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(
            self, "egress_allowlist", tuple(e.strip().lower() for e in self.egress_allowlist)
        )
        object.__setattr__(self, "mounts", tuple(self.mounts))
        object.__setattr__(self, "storage", tuple(self.storage))
        self._check()

    def __hash__(self) -> int:
        # A spec keys warm runtimes; its env is a dict, so hash a canonical form of every field.
        return hash(
            tuple(
                tuple(sorted(value.items())) if isinstance(value, dict) else value
                for value in (getattr(self, f.name) for f in fields(self))
            )
        )

    def _check(self) -> None:
        if not _KEY.match(self.server_key):
            raise SandboxSpecError(
                "server_key",
                f"Server key {self.server_key!r} must be 1-80 letters, digits, '.', '_' or '-'.",
            )
        if not _IMAGE.match(self.image):
            raise SandboxSpecError("image", f"{self.image!r} is not an image reference.")
        if not all(isinstance(arg, str) and "\x00" not in arg for arg in self.argv):
            raise SandboxSpecError("argv", "The command must be a list of text arguments.")
        for name, value in self.env.items():
            if not _ENV_NAME.match(name):
                raise SandboxSpecError("env", f"{name!r} is not an environment variable name.")
            if not isinstance(value, str) or "\x00" in value:
                raise SandboxSpecError("env", f"The value of {name} must be text without NUL.")
        if self.working_dir and not self.working_dir.startswith("/"):
            raise SandboxSpecError("working_dir", "The working directory must be absolute.")
        user = _USER.match(self.user)
        if not user:
            raise SandboxSpecError(
                "user", f"User {self.user!r} must be numeric, uid or uid:gid (e.g. {NOBODY})."
            )
        if int(user["uid"]) == 0 or (user["gid"] is not None and int(user["gid"]) == 0):
            raise SandboxSpecError("user", "A sandboxed server never runs as root (uid/gid 0).")
        if self.memory_mb < 16:
            raise SandboxSpecError("memory_mb", "The memory limit must be at least 16 MB.")
        if not 0.01 <= self.cpus <= 64:
            raise SandboxSpecError("cpus", "The CPU limit must be between 0.01 and 64.")
        if not 4 <= self.pids_limit <= 65536:
            raise SandboxSpecError("pids_limit", "The process limit must be between 4 and 65536.")
        if self.network_mode not in NETWORK_MODES:
            raise SandboxSpecError(
                "network_mode",
                f"Network mode {self.network_mode!r} is not one of {', '.join(NETWORK_MODES)}.",
            )
        for entry in self.egress_allowlist:
            match = _EGRESS.match(entry)
            if not match or not 0 < int(match["port"]) < 65536:
                raise SandboxSpecError(
                    "egress_allowlist", f"{entry!r} is not host:port (e.g. api.github.com:443)."
                )
        if not 1 <= self.tmpfs_mb <= 1024:
            raise SandboxSpecError("tmpfs_mb", "The /tmp size must be between 1 and 1024 MB.")
        if not all(isinstance(m, HostMount) for m in self.mounts):
            raise SandboxSpecError("mounts", "Mounts must be HostMount(source, target).")
        if not all(isinstance(m, StorageMount) for m in self.storage):
            raise SandboxSpecError("storage", "Storage must be StorageMount(target, size_mb).")
        targets = [posixpath.normpath(m.target) for m in self.mounts]
        targets += [posixpath.normpath(m.target) for m in self.storage]
        if len(set(targets)) != len(targets):
            raise SandboxSpecError("storage", "Two mounts share a path in the container.")
        for label, value in (
            ("owner", self.owner),
            ("runtime_id", self.runtime_id),
            ("installation", self.installation),
        ):
            if len(value) > 200 or any(ch in value for ch in "\x00\n\r"):
                raise SandboxSpecError(label, f"{label} must be one short line of text.")
        if not self.owner:
            raise SandboxSpecError("owner", "The owner label must not be empty.")
        if not self.installation:
            raise SandboxSpecError("installation", "The installation label must not be empty.")


def resource_labels(spec: ContainerSpec, *, session_id: str, role: str) -> dict[str, str]:
    """The labels on everything one transport makes: container, proxy, network."""
    return {
        LABEL_MANAGED: "true",
        LABEL_INSTALLATION: spec.installation,
        LABEL_OWNER: spec.owner,
        LABEL_OWNER_HOST: socket.gethostname(),
        LABEL_OWNER_PID: process_identity(),
        LABEL_SESSION: session_id,
        LABEL_SERVER: spec.server_key,
        LABEL_RUNTIME: spec.runtime_id,
        LABEL_ROLE: role,
    }


def resource_name(spec: ContainerSpec, *, session_id: str, role: str) -> str:
    """A readable, unique name: toolroom-<server>-<role>-<session>."""
    return f"toolroom-{spec.server_key.lower()}-{role}-{session_id}"


def hardened_host_config(
    *,
    memory_mb: int,
    cpus: float,
    pids_limit: int,
    read_only_root: bool,
    tmpfs_mb: int,
    network_mode: str,
    mounts: Sequence[HostMount] = (),
    storage: Sequence[StorageMount] = (),
    dns: Sequence[str] = (),
) -> dict[str, Any]:
    """Keyword arguments of the engine's host config that every Toolroom container gets.

    Storage: a named volume, or a scratch tmpfs of its size owned by the sandbox's user; with
    any storage, no single file may grow past the largest storage's size (RLIMIT_FSIZE, which
    the kernel enforces on every write, /tmp included)."""
    config: dict[str, Any] = {
        "network_mode": network_mode,
        "read_only": read_only_root,
        "tmpfs": {"/tmp": f"rw,noexec,nosuid,nodev,size={tmpfs_mb}m"},  # noqa: S108 - container
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "privileged": False,
        "init": True,
        "ipc_mode": "private",
        "mem_limit": f"{memory_mb}m",
        "memswap_limit": f"{memory_mb}m",
        "nano_cpus": round(cpus * 1e9),
        "pids_limit": pids_limit,
        "auto_remove": True,
        "log_config": {
            "Type": "json-file",
            "Config": {"max-size": LOG_MAX_SIZE, "max-file": LOG_MAX_FILES},
        },
        "ulimits": [
            {"Name": "nofile", "Soft": OPEN_FILES_LIMIT, "Hard": OPEN_FILES_LIMIT},
            {"Name": "core", "Soft": 0, "Hard": 0},
        ],
    }
    if mounts:
        config["binds"] = {m.source: {"bind": m.target, "mode": "ro"} for m in mounts}
    volumes = [m for m in storage if m.volume]
    if volumes:
        config["mounts"] = [
            docker.types.Mount(m.target, m.volume, type="volume", read_only=m.read_only)
            for m in volumes
        ]
    for scratch in (m for m in storage if not m.volume):
        config["tmpfs"][scratch.target] = (
            f"rw,noexec,nosuid,nodev,size={scratch.size_mb}m,uid={NOBODY_UID},"
            f"gid={NOBODY_UID},mode=0700"
        )
    if storage:
        largest = max(m.size_mb for m in storage) * 1024 * 1024
        config["ulimits"].append({"Name": "fsize", "Soft": largest, "Hard": largest})
    if dns:
        config["dns"] = list(dns)
    return config
