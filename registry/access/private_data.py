"""The private-data ratchet's marks: which tokens (and people) have read confidential data.

More: docs/access.md, "Module notes".
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from registry.audit.services import Actor, audit_record
from registry.core.cache import CACHE_ERRORS, hot_cache
from registry.oauth.models import ClientAuthorization
from registry.servers.policy import DataSensitivity
from registry.teams.callers import Caller, PersonIdentity
from registry.teams.models import AgentToken, Membership, Team

PRIVATE_SENSITIVITIES = frozenset({DataSensitivity.CONFIDENTIAL, DataSensitivity.SECRET})
# A stateless caller's conversation when it names none (token_conversation).
UNNAMED_CONVERSATION_PREFIX = "agent-recent:"
_KEY_PREFIX = "gateway-ratchet:"


class RatchetUnavailable(Exception):
    """The cache refused to read or write a mark: the call is refused rather than let through."""


def rest_conversation_key(*, caller: str, conversation: str) -> str:
    """The conversation of a REST call (its audit and a per-conversation server's session): the
    id the caller sends, scoped to its token (an agent) or its client authorization (a person);
    none else. `caller`: `registry.teams.callers.caller_key`. The ratchet does not read it."""
    given = conversation.strip()[:200]
    return f"{caller}:conversation:{given}" if given else ""


def token_conversation(caller: str) -> str:
    """The conversation of a stateless caller that names none: its token (a person: their client
    authorization, which outlives each refreshed token). `caller`: `caller_key`."""
    return f"{UNNAMED_CONVERSATION_PREFIX}{caller}"


def _team_subjects(
    team_id: int, *, tokens: list[int], authorizations: list[int], people: list[int]
) -> list[str]:
    return [
        *(f"team:{team_id}:token:{token}" for token in tokens),
        *(f"team:{team_id}:authorization:{authorization}" for authorization in authorizations),
        *(f"team:{team_id}:person:{person}" for person in people),
    ]


def ratchet_subjects(caller: Caller) -> list[str]:
    """Who holds a mark for this caller: the agent token; for a person's token, the app's
    authorization and the person (within the team)."""
    if isinstance(caller, PersonIdentity):
        return _team_subjects(
            caller.team_id,
            tokens=[],
            authorizations=[caller.authorization_id],
            people=[caller.person_id],
        )
    return _team_subjects(caller.team_id, tokens=[caller.token_id], authorizations=[], people=[])


def _keys(subjects: list[str]) -> list[str]:
    return [_KEY_PREFIX + subject for subject in subjects]


def ratchet_window_seconds(team_window: int | None) -> int:
    """The team's window, or the installation's default."""
    return int(team_window or settings.TOOLROOM_GATEWAY_RATCHET_WINDOW_SECONDS)


def private_data_seen(caller: Caller) -> str | None:
    """The server whose confidential or secret data this caller has read within the window, if
    any. Raises `RatchetUnavailable` when the cache cannot say."""
    try:
        found = hot_cache().get_many(_keys(ratchet_subjects(caller)))
    except CACHE_ERRORS as exc:
        raise RatchetUnavailable(str(exc)) from exc
    for value in found.values():
        if value is not None:
            return str(value)
    return None


def private_data_mark(*, caller: Caller, server_slug: str, seconds: int) -> None:
    """Remember that the caller has read private data (called after such a read). Every private
    read renews the mark, so the window runs from the last one and never resets at a clock
    boundary. Raises `RatchetUnavailable` when the cache refuses the write."""
    marks = dict.fromkeys(_keys(ratchet_subjects(caller)), server_slug)
    try:
        refused = hot_cache().set_many(marks, timeout=seconds)
    except CACHE_ERRORS as exc:
        raise RatchetUnavailable(str(exc)) from exc
    if refused:
        raise RatchetUnavailable(f"the cache did not keep {len(refused)} mark(s)")


@dataclass(frozen=True)
class RatchetReset:
    team: Team
    cleared: dict[str, str]  # subject -> the server whose data it had read


def private_data_marks(team: Team) -> dict[str, str]:
    """The team's marks now: subject (token, authorization or person) -> server."""
    subjects = _team_subjects(
        team.pk,
        tokens=list(AgentToken.objects.filter(team=team).values_list("pk", flat=True)),
        authorizations=list(
            ClientAuthorization.objects.filter(team=team).values_list("pk", flat=True)
        ),
        people=sorted(
            {
                *Membership.objects.filter(team=team).values_list("user_id", flat=True),
                *ClientAuthorization.objects.filter(team=team).values_list("person_id", flat=True),
            }
        ),
    )
    try:
        found = hot_cache().get_many(_keys(subjects))
    except CACHE_ERRORS as exc:
        raise RatchetUnavailable(str(exc)) from exc
    return {
        key.removeprefix(_KEY_PREFIX): str(value)
        for key, value in found.items()
        if value is not None
    }


@transaction.atomic
def private_data_reset(*, actor: Actor, team: Team, reason: str = "") -> RatchetReset:
    """Clear every private-data mark of the team's tokens and people, audited (the team's owners
    through the API, admins in the admin). Raises `RatchetUnavailable` when the cache refuses."""
    cleared = private_data_marks(team)
    if cleared:
        try:
            hot_cache().delete_many(_keys(list(cleared)))
        except CACHE_ERRORS as exc:
            raise RatchetUnavailable(str(exc)) from exc
    audit_record(
        actor=actor,
        action="team.private_data_reset",
        target=team,
        summary=(f"Reset the private-data ratchet of {team.slug}: {len(cleared)} mark(s) cleared."),
        before={"marks": cleared},
        after={"marks": {}},
        details={"reason": reason[:500]},
    )
    return RatchetReset(team=team, cleared=cleared)
