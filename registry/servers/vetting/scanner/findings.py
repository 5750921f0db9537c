"""What the scanner reports: finding kinds and severities, `Finding`, and the collector that
merges hits into one finding per kind and place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

FindingKind = Literal[
    "hidden_unicode",
    "instructions_to_model",
    "secret_or_file_request",
    "oversized_description",
    "oversized_schema",
    "suspicious_name",
    "markup_in_text",
]
Severity = Literal["high", "medium", "low"]

KINDS: Final[tuple[str, ...]] = get_args(FindingKind)
SEVERITIES: Final[tuple[str, ...]] = get_args(Severity)


_SEVERITY_RANK: Final[dict[str, int]] = {"high": 0, "medium": 1, "low": 2}
# A message names at most this many distinct things found at one place, and a rule builds
# excerpts for at most this many matches in one string (the rest are only counted).
_LABELS_SHOWN: Final = 6
_MATCHES_DETAILED: Final = 20

_WHY: Final[dict[str, str]] = {
    "hidden_unicode": (
        "The model reads these characters but reviewers and most clients do not show them, so "
        "text can be smuggled past review."
    ),
    "instructions_to_model": (
        "Tool metadata that gives the model orders can steer the agent without the user seeing "
        "it (tool poisoning)."
    ),
    "secret_or_file_request": (
        "A tool that asks the model to read keys, credentials or private files and pass them on "
        "can exfiltrate them through its arguments."
    ),
    "oversized_description": (
        "Very long or padded text hides content below what a reviewer reads and costs context "
        "on every request."
    ),
    "oversized_schema": (
        "A huge or deeply nested schema costs context on every request and is hard to review."
    ),
    "suspicious_name": "A look-alike or unusual name can impersonate or shadow another tool.",
    "markup_in_text": (
        "HTML in text the model reads can hide content from reviewers (comments, hidden "
        "elements) or render as links and images in clients that show it."
    ),
}

_LEADS: Final[dict[str, str]] = {
    "hidden_unicode": "Hidden Unicode",
    "instructions_to_model": "Text aimed at the model rather than describing the tool",
    "secret_or_file_request": "Asks for secrets or sensitive files",
    "oversized_description": "Oversized text",
    "oversized_schema": "Oversized schema",
    "suspicious_name": "Suspicious name",
    "markup_in_text": "HTML markup",
}


@dataclass(frozen=True)
class Finding:
    """One thing an admin should look at before approving a tool."""

    kind: FindingKind
    severity: Severity
    location: str
    message: str
    excerpt: str
    count: int = 1
    rules: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "location": self.location,
            "message": self.message,
            "excerpt": self.excerpt,
            "count": self.count,
            "rules": list(self.rules),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        kind, severity = data["kind"], data["severity"]
        if kind not in KINDS or severity not in SEVERITIES:
            raise ValueError(f"Not a scanner finding: kind={kind!r} severity={severity!r}")
        return cls(
            kind=kind,
            severity=severity,
            location=str(data["location"]),
            message=str(data["message"]),
            excerpt=str(data.get("excerpt", "")),
            count=int(data.get("count", 1)),
            rules=tuple(str(rule) for rule in data.get("rules", ())),
        )


# --- Collecting ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Hit:
    kind: FindingKind
    rule: str
    severity: Severity
    label: str
    excerpt: str
    count: int = 1


@dataclass
class _Group:
    kind: FindingKind
    location: str
    order: int
    severity: Severity
    excerpt: str
    count: int = 0
    rules: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    more_labels: int = 0


class _Collector:
    """Merges hits into one finding per (kind, location), keeping the first place they were seen."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], _Group] = {}

    def add(self, location: str, hit: _Hit) -> None:
        key = (hit.kind, location)
        group = self._groups.get(key)
        if group is None:
            group = _Group(hit.kind, location, len(self._groups), hit.severity, hit.excerpt)
            self._groups[key] = group
        elif _SEVERITY_RANK[hit.severity] < _SEVERITY_RANK[group.severity]:
            # The excerpt shows the worst thing found at this place.
            group.severity, group.excerpt = hit.severity, hit.excerpt
        group.count += hit.count
        if hit.rule not in group.rules:
            group.rules.append(hit.rule)
        if hit.label not in group.labels:
            if len(group.labels) < _LABELS_SHOWN:
                group.labels.append(hit.label)
            else:
                group.more_labels += 1

    def findings(self) -> list[Finding]:
        groups = sorted(self._groups.values(), key=lambda g: (_SEVERITY_RANK[g.severity], g.order))
        return [self._finding(group) for group in groups]

    @staticmethod
    def _finding(group: _Group) -> Finding:
        labels = "; ".join(group.labels)
        if group.more_labels:
            labels += "; and others"
        if group.kind in ("instructions_to_model", "secret_or_file_request") and group.count > 1:
            labels += f" ({group.count} matches)"
        message = f"{_LEADS[group.kind]}: {labels}. {_WHY[group.kind]}"
        return Finding(
            kind=group.kind,
            severity=group.severity,
            location=group.location,
            message=message,
            excerpt=group.excerpt,
            count=group.count,
            rules=tuple(group.rules),
        )
