"""Which sandbox images the registered servers still use: what `sandbox prune` must keep.

For every server: the images it last ran (its status, then the `server.sandbox_image_changed`
audit trail, newest first; the last `keep_per_server` distinct ones), its own image reference,
and the package it is registered with (so an image built for a package but not yet run stays).
Packages are named "pypi:name==version" / "npm:name@version", as the sandbox adapter names the
package an image was built from.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from registry.audit.models import AuditEvent
from registry.servers.models import McpServer, ServerStatus


@dataclass
class SandboxImagesInUse:
    references: set[str] = field(default_factory=set)
    image_ids: set[str] = field(default_factory=set)
    packages: set[str] = field(default_factory=set)


def package_key(registry: str, identifier: str, version: str) -> str:
    separator = "==" if registry == "pypi" else "@"
    return f"{registry}:{identifier}{separator}{version}"


def sandbox_images_in_use(*, keep_per_server: int) -> SandboxImagesInUse:
    """What prune keeps; `keep_per_server` (at least 1) images each server ran most recently."""
    keep_per_server = max(1, keep_per_server)
    in_use = SandboxImagesInUse()
    history: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for server_id, reference, digest in ServerStatus.objects.exclude(sandbox_image="").values_list(
        "server_id", "sandbox_image", "sandbox_image_digest"
    ):
        history[server_id].append((reference, digest))
    events = (
        AuditEvent.objects.filter(action="server.sandbox_image_changed", server__isnull=False)
        .order_by("-created_at", "-pk")
        .values_list("server_id", "after")
    )
    for server_id, after in events.iterator():
        if isinstance(after, dict) and after.get("image"):
            history[server_id].append((str(after["image"]), str(after.get("digest", ""))))
    for ran in history.values():
        seen: list[str] = []
        for reference, digest in ran:
            if reference in seen:
                continue
            seen.append(reference)
            if len(seen) > keep_per_server:
                break
            in_use.references.add(reference)
            if digest:
                in_use.image_ids.add(digest)
    for registry, identifier, version, image in McpServer.objects.values_list(
        "package_registry", "package_identifier", "package_version", "image"
    ):
        if registry in ("pypi", "npm") and identifier and version:
            in_use.packages.add(package_key(registry, identifier, version))
        if image:
            in_use.references.add(image)
    return in_use
