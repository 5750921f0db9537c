"""Which RuntimeManager this process runs, if it is a runtime worker (set at worker start)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workers.runtime import RuntimeManager

_manager: RuntimeManager | None = None


def current_manager() -> RuntimeManager | None:
    return _manager


def set_manager(manager: RuntimeManager | None) -> None:
    global _manager  # noqa: PLW0603 - one manager per runtime worker process
    _manager = manager
