"""Who calls the catalogue and the gateway: an agent or a person, as one type the call path carries.

An agent is a headless program with a team's agent token (`AgentIdentity`, registry.teams.tokens).
A person is someone who signed in through an MCP client of their own with OAuth (registry.oauth):
their `PersonIdentity` names the person, the team and role they consented to, the client, and the
access token of the moment. Both carry the team and role every catalogue and call rule reads;
`caller_key` is what a conversation, a question asked mid-call or a cached per-caller document is
keyed by (an agent's token; a person's client authorization, which outlives each refreshed token).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from registry.teams.tokens import AgentIdentity, token_mark_used


@dataclass(frozen=True)
class PersonStanding:
    """What the person's token rests on besides itself, as the database said at one team version:
    the person is active, still a member of the team, still allowed the role, and the client's
    authorization is not revoked."""

    active: bool
    member: bool
    role_allowed: bool
    authorization_active: bool

    @property
    def good(self) -> bool:
        return self.active and self.member and self.role_allowed and self.authorization_active


@dataclass(frozen=True)
class PersonIdentity:
    """A person acting through an OAuth client for one team and role."""

    token_id: int  # the access token's row (a new one at every refresh)
    person_id: int
    person_name: str
    team_id: int
    role_id: int
    client_id: int  # the registered client's row
    client_name: str
    authorization_id: int  # the person's consent for this client and team
    expires_at: float | None  # POSIX seconds
    standing: PersonStanding
    team_slug: str = ""
    role_name: str = ""
    # What the catalogue reads of an agent token; a person declares no servers and follows the
    # team's tool exposure.
    declared_servers: dict[str, list[str]] = field(default_factory=dict)
    tool_exposure: str = ""
    # The person's accounts at per-person servers, read with the token at the team's version:
    # {server slug: "linked" | "broken"} (registry/upstream; the upstream_account rule reads it).
    upstream_accounts: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"person:{self.person_name}"

    @property
    def caller_key(self) -> str:
        return f"authorization:{self.authorization_id}"


Caller = AgentIdentity | PersonIdentity


def caller_key(identity: Caller) -> str:
    """What a caller's conversations and questions are scoped to (see the module's docstring)."""
    if isinstance(identity, PersonIdentity):
        return identity.caller_key
    return f"token:{identity.token_id}"


def caller_mark_used(identity: Caller, *, may_write_database: bool) -> None:
    """Record an agent token's use (`token_mark_used`); a person's app records its use when it
    refreshes its token (registry.oauth), not on every request."""
    if isinstance(identity, AgentIdentity):
        token_mark_used(identity, may_write_database=may_write_database)
