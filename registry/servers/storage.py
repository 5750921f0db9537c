"""Storage for sandboxed servers: what an admin asks for (`McpServer.storage`, Toolroom YAML's
`sandbox.storage`), the rules it must follow, and which volume a session gets.

More: docs/sandbox.md, "Module notes"."""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import models

from registry.servers.launch_spec import LaunchSpecError

MAX_STORAGE_ENTRIES = 4
MAX_SIZE_MB = 10_240
# Container paths storage never covers: the system's, the sandbox's own /tmp, the image's code.
FORBIDDEN_PATHS = (
    *("/proc", "/sys", "/dev", "/tmp", "/etc", "/usr", "/bin", "/sbin", "/lib"),  # noqa: S108
    "/opt/server",
)
_PATH = re.compile(r"^/[A-Za-z0-9._/-]{1,199}$")


class StorageScope(models.TextChoices):
    SERVER = "server", "One for the server"
    TEAM = "team", "One per team"
    PERSON = "person", "One per person"
    CONVERSATION = "conversation", "One per conversation"


# From broad to narrow. A session's isolation key names who it serves (shared, a team, a
# conversation of a team); storage may be as narrow as that, not narrower.
_BREADTH = {"shared": 0, "server": 0, "team": 1, "person": 2, "conversation": 3}
PERSON_NOT_YET = (
    "Per-person storage needs the gateway to know the person calling (people signing in to the "
    "gateway, issue 24) and sessions kept per person; until then use team or conversation."
)


@dataclass(frozen=True)
class StorageEntry:
    path: str
    scope: str
    size_mb: int

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "scope": self.scope, "size_mb": self.size_mb}


def _under(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree + "/")


def check_storage(entries: Any, *, isolation_scope: str | None = None) -> list[StorageEntry]:
    """The entries, checked: raises LaunchSpecError("storage", why) naming the entry.

    `isolation_scope` (the gateway's: shared, team, conversation) also refuses storage narrower
    than the sessions it would be mounted in."""
    if not isinstance(entries, list):
        raise LaunchSpecError("storage", "Storage is a list of {path, scope, size_mb}.")
    if len(entries) > MAX_STORAGE_ENTRIES:
        raise LaunchSpecError("storage", f"At most {MAX_STORAGE_ENTRIES} storage paths.")
    checked: list[StorageEntry] = []
    for index, raw in enumerate(entries):
        where = f"storage[{index}]"
        if not isinstance(raw, dict) or set(raw) - {"path", "scope", "size_mb"}:
            raise LaunchSpecError(
                "storage", f"{where}: give path, scope and size_mb (and nothing else)."
            )
        path, scope, size = (
            raw.get("path"),
            raw.get("scope", StorageScope.SERVER),
            raw.get("size_mb"),
        )
        if not isinstance(path, str) or not _PATH.match(path) or ".." in path.split("/"):
            raise LaunchSpecError(
                "storage",
                f"{where}: path {path!r} must be an absolute path in the container (letters, "
                "digits, '.', '_', '-', '/'), without '..'.",
            )
        path = posixpath.normpath(path)
        if path == "/" or any(_under(path, tree) for tree in FORBIDDEN_PATHS):
            raise LaunchSpecError(
                "storage", f"{where}: {path} is the container's own; choose e.g. /data."
            )
        if scope not in StorageScope.values:
            raise LaunchSpecError(
                "storage",
                f"{where}: scope {scope!r} is not one of {', '.join(StorageScope.values)}.",
            )
        if scope == StorageScope.PERSON:
            raise LaunchSpecError("storage", f"{where}: {PERSON_NOT_YET}")
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE_MB:
            raise LaunchSpecError(
                "storage", f"{where}: size_mb must be a whole number from 1 to {MAX_SIZE_MB}."
            )
        for other in checked:
            if _under(path, other.path) or _under(other.path, path):
                raise LaunchSpecError(
                    "storage", f"{where}: {path} overlaps {other.path}; give separate paths."
                )
        if isolation_scope is not None and _BREADTH[scope] > _BREADTH[isolation_scope]:
            raise LaunchSpecError(
                "storage",
                f"{where}: storage per {scope} needs sessions per {scope} at least, but the "
                f"server's gateway isolation scope is {isolation_scope}: one session would "
                f"serve several {scope}s. Narrow the isolation scope, or widen the storage.",
            )
        checked.append(StorageEntry(path=path, scope=str(scope), size_mb=size))
    return checked


def storage_owner_key(scope: str, isolation_key: str) -> str | None:
    """Whose volume a session with `isolation_key` (shared, team:<id>,
    conversation:<team id>:<hash>, or "" for discovery and health checks) gets for storage of
    `scope`: "server", "team:<id>", "conversation:<hash>"; None when the session belongs to
    nobody that narrow (it gets a scratch tmpfs)."""
    if scope == StorageScope.SERVER:
        return "server"
    kind, _, rest = isolation_key.partition(":")
    if scope == StorageScope.TEAM:
        if kind == "team":
            return f"team:{rest}"
        if kind == "conversation" and ":" in rest:
            return f"team:{rest.split(':', 1)[0]}"
        return None
    if scope == StorageScope.CONVERSATION and kind == "conversation":
        return f"conversation:{rest.rsplit(':', 1)[-1]}"
    return None


def storage_volume_name(*, server_slug: str, path: str, owner_key: str) -> str:
    """The engine's name of one volume: readable, unique per installation (two Toolrooms may
    share an engine and a server slug), server, path and owner."""
    installation = str(settings.TOOLROOM_INSTALLATION)
    key = f"{installation}\0{server_slug}\0{path}\0{owner_key}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"toolroom-vol-{server_slug.lower()[:60]}-{digest}"
