"""What every import format is turned into before it is checked: parsed entries and problems.

Each format module (mcp.json, server.json, Toolroom YAML) reads its own shape and produces a
`ParsedFile`: one `ParsedEntry` per server, holding the model field values the file expresses,
plus the problems and warnings it found. Planning then treats every format the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.utils.text import slugify

from registry.core.errors import ApplicationError

SLUG_MAX_LENGTH = 80


@dataclass(frozen=True)
class ImportProblem:
    """One reason a file cannot be imported: which entry, which field, and why (for an admin)."""

    entry: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = ": ".join(part for part in (self.entry, self.field) if part)
        return f"{where}: {self.message}" if where else self.message


class ImportFileError(ApplicationError):
    """The file was refused as a whole; `problems` lists every reason, nothing was written."""

    def __init__(self, problems: list[ImportProblem]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(
            f"The file was not imported ({count} {noun}); nothing was written.",
            extra={"problems": [str(problem) for problem in self.problems]},
        )

    def __str__(self) -> str:
        return "\n".join([self.message, *(f"  - {problem}" for problem in self.problems)])


@dataclass
class ParsedCategory:
    slug: str
    name: str
    description: str = ""


@dataclass
class ParsedEntry:
    """One server as a file describes it, in the model's terms.

    `fields` holds the values the file sets on every import; `create_defaults` the values used
    only when the server is new (an mcp.json key names a new server, but must not rename an
    existing one). Env and header values may be None: "keep the value already stored".
    """

    label: str
    slug: str
    fields: dict[str, Any] = field(default_factory=dict)
    create_defaults: dict[str, Any] = field(default_factory=dict)
    category: str | None = None
    category_given: bool = False
    trust_tier: str | None = None
    warnings: list[str] = field(default_factory=list)
    problems: list[ImportProblem] = field(default_factory=list)
    # How the file names a model field, so that messages point at what the admin wrote.
    field_labels: dict[str, str] = field(default_factory=dict)
    # Packages a launcher command named without a version, pinned at import (launchers.PackagePin).
    pins: list[Any] = field(default_factory=list)
    # The upstream OAuth client the file names (an mcp.json `oauth` object's `clientId`, and its
    # `clientSecret` and `scopes` if given): {"client_id", "client_secret", "scopes"}.
    upstream_client: dict[str, str] | None = field(default=None, repr=False)

    def problem(self, field_name: str | None, message: str) -> None:
        self.problems.append(ImportProblem(self.label, field_name, message))

    def label_for(self, model_field: str) -> str:
        return self.field_labels.get(model_field, model_field)


@dataclass
class ParsedFile:
    format: str
    entries: list[ParsedEntry] = field(default_factory=list)
    categories: list[ParsedCategory] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[ImportProblem] = field(default_factory=list)


def slug_from_name(name: str) -> str:
    """A server slug from a display or registry name: lower case, words joined by hyphens.

    Dots, slashes, underscores and spaces all become hyphens, so "io.github.user/weather" gives
    "io-github-user-weather", and "My Server" and "my_server" give the same slug (which the
    planner reports as a collision rather than importing one over the other).
    """
    text = re.sub(r"[\s._/\\:@]+", "-", name)
    slug = re.sub(r"[-_]+", "-", slugify(text)).strip("-")
    return slug[:SLUG_MAX_LENGTH].rstrip("-")
