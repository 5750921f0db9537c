"""The one application error type that services raise and every entry point turns into a message."""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    """A rule of the domain refused the request; `message` is meant for the person who asked.

    `field` names the input at fault where there is one, so forms and the API can attach the
    message to it; `extra` carries structured details (for the API's error body).
    """

    def __init__(
        self, message: str, *, field: str | None = None, extra: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.extra = extra or {}

    def __str__(self) -> str:
        return self.message
