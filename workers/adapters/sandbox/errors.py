"""The sandbox's errors and the record of how a server's container ended, worded for an admin."""

from __future__ import annotations

from dataclasses import dataclass, field


class SandboxError(Exception):
    """A sandboxed server could not be started, failed, or was killed; `fate` says how it ended."""

    def __init__(self, message: str, *, fate: ContainerFate | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fate = fate


class SandboxSpecError(SandboxError, ValueError):
    """A container spec that the sandbox refuses to run (a socket mount, root, a bad name...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class EngineUnavailableError(SandboxError):
    """No Docker engine answers."""


class ImageBuildError(SandboxError):
    """An image could not be built; the message names the step and the tail of its output."""


@dataclass(frozen=True)
class ContainerFate:
    """How a server's container ended.

    `stopped_by_toolroom` is true when the transport stopped it (a normal close, or a server that
    did not exit within the grace period after its stdin closed); then exit code 137 is expected.
    `exit_code` is None when the engine no longer knew (the container was gone before it was asked).
    """

    container_id: str
    server_key: str
    exit_code: int | None
    oom_killed: bool
    stopped_by_toolroom: bool
    memory_limit_mb: int
    stderr_tail: tuple[str, ...] = field(default=())
    error: str = ""

    @property
    def failed(self) -> bool:
        """True when the server died on its own in a way an admin should hear about."""
        if self.oom_killed or self.error:
            return True
        if self.stopped_by_toolroom:
            return False
        return self.exit_code is None or self.exit_code != 0

    def describe(self) -> str:
        """One sentence for an admin: why the server ended."""
        if self.oom_killed:
            text = (
                f"the server was killed for using more than {self.memory_limit_mb} MB of memory "
                "(OOM)"
            )
        elif self.error:
            text = f"the server's container failed: {self.error}"
        elif self.stopped_by_toolroom:
            text = "the server was stopped by Toolroom"
        elif self.exit_code is None:
            text = "the server's container ended and its exit code is unknown"
        elif self.exit_code == 0:
            text = "the server exited normally (exit code 0)"
        elif self.exit_code == 127:
            text = "the server's command was not found in the image (exit code 127)"
        elif self.exit_code == 126:
            text = "the server's command could not be run (exit code 126)"
        elif self.exit_code > 128:
            text = (
                f"the server was killed by signal {self.exit_code - 128} "
                f"(exit code {self.exit_code})"
            )
        else:
            text = f"the server exited with code {self.exit_code}"
        if self.failed and self.stderr_tail:
            text += f"; last stderr line: {self.stderr_tail[-1]}"
        return text
