"""The types the access rules are made of (registry/access/rules.py holds the rules themselves):
the facts a rule decides on, the moment of a decision, a refusal, the rows an explanation loaded,
and the two kinds of rule."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from registry.servers.gateway_policy import ServerGatewayPolicy
from registry.servers.models import (
    ItemReview,
    McpServer,
    ServerPrompt,
    ServerResource,
    Tool,
    ToolApproval,
)
from registry.teams.callers import Caller
from registry.teams.models import Grant, TeamRole


class Kind(StrEnum):
    """What the rules decide on: a tool, or a server's resource or prompt (docs/access.md, "What
    a grant covers")."""

    TOOL = "tool"
    RESOURCE = "resource"
    PROMPT = "prompt"


# The review state of a resource or prompt an admin hid (a tool's states are ApprovalState's; an
# item's are ItemReview's: pending, approved, hidden).
HIDDEN = str(ItemReview.HIDDEN)


class Stage(StrEnum):
    CALLER = "caller"  # reads the caller only: checked before the tool is looked up
    CATALOGUE = "catalogue"  # decides whether the tool is in the team role's catalogue
    CALL = "call"  # added by the gateway at call time


@dataclass(frozen=True, slots=True)
class ToolFacts:
    """What the rules decide on for one tool and one team role, read at one catalogue version."""

    name: str  # namespaced: what agents call it
    server_slug: str
    granted: bool  # an active grant of the tool or its server applies to the role
    access_ends_at: float | None  # POSIX seconds, the latest expiry of those grants; None: never
    offered: bool
    review_status: str
    approval_state: str
    approved_definition_hash: str
    definition_hash: str
    permission_class: str
    role_name: str
    role_classes: tuple[str, ...]
    health: str
    hide_unhealthy: bool
    gateway_mode: str
    circuit_state: str
    upstream_auth: str = "shared"  # the server's UpstreamAuth
    # A resource or prompt: read-class, granted only by a grant of its whole server; its
    # approval_state and hashes are its own review (ItemReview: offered only while approved at its
    # current definition); every other rule applies to it as to a tool.
    kind: str = Kind.TOOL


@dataclass(frozen=True, slots=True)
class Moment:
    """What a decision reads besides the versioned facts: the clock and who calls (the ratchet's
    key; None where the question is about a team role)."""

    now: float  # POSIX seconds
    caller: Caller | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str
    message: str  # what the refused caller reads
    evidence: str = ""  # the value the refusal rests on, for the explanation (the ratchet's server)


@dataclass(frozen=True)
class ToolRecord:
    """The rows the explanation loaded for one tool (or a server's resource or prompt, the item)
    and one team role: what its facts come from, and what each rule's explanation shows."""

    tool: Tool | None  # with its server and the server's status; None for an item
    role: TeamRole
    policy: ServerGatewayPolicy | None
    approval: ToolApproval | None  # the active one, else the latest ended one
    applying: list[Grant]  # active, for this role or every role (their access requests loaded)
    other_roles: list[Grant]  # active, for the team's other roles only
    lapsed: list[Grant]  # revoked or expired, for this role or every role
    at: datetime
    hide_unhealthy: bool
    caller: Caller | None  # whose private-data marks the ratchet checks (None: a team role's)
    # A resource (or resource template) or prompt, with its server and the server's status; its
    # grants are those of its whole server, and it has no approval history (its review is its own).
    item: ServerResource | ServerPrompt | None = None

    @property
    def server(self) -> McpServer:
        subject = self.tool if self.tool is not None else self.item
        if subject is None:
            raise ValueError("A record is of a tool or of an item.")
        return subject.server

    @property
    def kind(self) -> str:
        if self.tool is not None:
            return Kind.TOOL
        return Kind.RESOURCE if isinstance(self.item, ServerResource) else Kind.PROMPT


@dataclass(frozen=True)
class Explanation:
    reason: str  # one sentence saying what was found
    facts: dict[str, Any]


@dataclass(frozen=True)
class ToolRule:
    name: str
    stage: Stage
    live: bool
    refuse: Callable[[ToolFacts, Moment], Refusal | None]
    explain: Callable[[ToolRecord, Refusal | None], Explanation]


@dataclass(frozen=True)
class CallerRule:
    name: str
    live: bool
    refuse: Callable[[Caller, float], Refusal | None]
    stage: Stage = Stage.CALLER
