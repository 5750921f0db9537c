"""Pruning the sandbox images no server uses any more (`manage.py sandbox prune` and its daily
task): the registry says what is in use, the sandbox adapter removes the rest."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from django.conf import settings

from registry.servers.jobs.sandbox_images import sandbox_images_in_use
from workers.adapters.sandbox import PruneReport, prune_server_images


def sandbox_images_prune(
    *,
    keep_per_server: int | None = None,
    min_age: timedelta | None = None,
    dry_run: bool = False,
    repository_prefix: str = "toolroom/",
    say: Callable[[str], None] = lambda _line: None,
) -> PruneReport:
    """Remove the server images no registered server uses (keeping each server's last
    `keep_per_server` and anything younger than `min_age`); base images are never touched."""
    keep = settings.TOOLROOM_SANDBOX_PRUNE_KEEP if keep_per_server is None else keep_per_server
    if min_age is None:
        min_age = timedelta(hours=settings.TOOLROOM_SANDBOX_PRUNE_MIN_AGE_HOURS)
    in_use = sandbox_images_in_use(keep_per_server=keep)
    return prune_server_images(
        keep_references=in_use.references,
        keep_image_ids=in_use.image_ids,
        keep_packages=in_use.packages,
        min_age=min_age,
        repository_prefix=repository_prefix,
        dry_run=dry_run,
        say=say,
    )


def describe_bytes(size: int) -> str:
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"
