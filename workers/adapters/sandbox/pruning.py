"""Removing the server images Toolroom built that nothing uses any more (`sandbox prune`).

Only images labelled `io.toolroom.role=server-image` (package and test-server images built by
`images/`) under `repository_prefix` are candidates: base images and the egress proxy's image
are never touched, nor anything Toolroom did not build. An image is kept when the caller names it
(by reference, by image ID, or by the package it was built from), when it is younger than
`min_age` (a worker may be about to run what it just built), or when a container still uses it.
Bytes freed are the images' unique sizes (what no other image shares), as the engine reports them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import docker

from workers.adapters.sandbox.engine import Engine, connect_engine
from workers.adapters.sandbox.images import LABEL_INPUTS
from workers.adapters.sandbox.spec import LABEL_MANAGED, LABEL_ROLE

SERVER_IMAGE_ROLE = "server-image"


@dataclass(frozen=True)
class PrunedImage:
    reference: str
    image_id: str
    unique_bytes: int


@dataclass
class PruneReport:
    removed: list[PrunedImage] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # reference -> why

    @property
    def bytes_freed(self) -> int:
        return sum(image.unique_bytes for image in self.removed)


def package_key(inputs: dict[str, Any]) -> str:
    """The package an image was built from, as "pypi:name==version" or "npm:name@version"
    (the registry side names packages in use the same way); "" for other images."""
    if inputs.get("kind") == "npm" and isinstance(inputs.get("package"), str):
        return f"npm:{inputs['package']}"
    requirements = inputs.get("requirements")
    if inputs.get("kind") == "python" and isinstance(requirements, list) and len(requirements) == 1:
        return f"pypi:{requirements[0]}"
    return ""


def _created(attrs: dict[str, Any]) -> datetime:
    text = str(attrs.get("Created", ""))
    # The engine writes nanoseconds; Python parses microseconds.
    trimmed = text[:26] + "+00:00" if len(text) > 26 else text.replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(trimmed)
    except ValueError:
        return datetime.now(UTC)


def prune_server_images(
    *,
    keep_references: Collection[str] = (),
    keep_image_ids: Collection[str] = (),
    keep_packages: Collection[str] = (),
    min_age: timedelta = timedelta(hours=24),
    repository_prefix: str = "toolroom/",
    dry_run: bool = False,
    engine: Engine | None = None,
    say: Callable[[str], None] = lambda _line: None,
) -> PruneReport:
    """Remove the unused server images (see the module's docstring); returns what went."""
    own = engine is None
    engine = engine or connect_engine()
    report = PruneReport()
    try:
        unique = {
            entry["Id"]: max(0, int(entry.get("Size", 0)) - max(0, int(entry.get("SharedSize", 0))))
            for entry in engine.df().get("Images") or []
        }
        now = datetime.now(UTC)
        images = engine.images.list(
            filters={"label": [f"{LABEL_ROLE}={SERVER_IMAGE_ROLE}", f"{LABEL_MANAGED}=true"]}
        )
        for image in images:
            tags = [tag for tag in image.tags if tag.startswith(repository_prefix)]
            if not tags:
                continue
            label = ", ".join(tags)
            try:
                inputs = json.loads((image.labels or {}).get(LABEL_INPUTS, "{}"))
            except ValueError:
                inputs = {}
            why = ""
            if image.id in keep_image_ids or any(tag in keep_references for tag in tags):
                why = "a server runs it"
            elif (key := package_key(inputs)) and key in keep_packages:
                why = f"a server is registered with {key}"
            elif now - _created(image.attrs) < min_age:
                why = f"younger than {min_age}"
            if why:
                report.kept[label] = why
                continue
            if dry_run:
                report.removed.append(PrunedImage(label, image.id, unique.get(image.id, 0)))
                continue
            try:
                deleted = False
                for tag in tags:
                    for line in engine.api.remove_image(tag, noprune=False) or []:
                        deleted = deleted or line.get("Deleted") == image.id
            except docker.errors.APIError as exc:
                report.kept[label] = f"the engine refused: {exc.explanation or exc}"
                continue
            if deleted:
                report.removed.append(PrunedImage(label, image.id, unique.get(image.id, 0)))
                say(f"removed {label} ({unique.get(image.id, 0)} bytes)")
            else:
                report.kept[label] = "still tagged under another name"
    finally:
        if own:
            engine.close()
    return report
