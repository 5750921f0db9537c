"""What the grant rule's explanation shows of a grant, and when access through grants ends."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar

from registry.teams.models import AccessRequest, Grant

Moment_T = TypeVar("Moment_T", datetime, float)


def iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def grant_facts(grant: Grant, *, at: datetime) -> dict[str, Any]:
    requests: list[AccessRequest] = getattr(grant, "request_history", [])
    state = (
        "revoked"
        if grant.revoked_at is not None
        else "expired"
        if grant.expires_at is not None and grant.expires_at <= at
        else "active"
    )
    return {
        "id": grant.pk,
        "scope": "tool" if grant.tool_id else "server",
        "role": grant.role.name if grant.role is not None else None,
        "expires_at": iso(grant.expires_at),
        "granted_by": grant.granted_by_label,
        "granted_at": iso(grant.granted_at),
        "note": grant.note,
        "state": state,
        "revoked_at": iso(grant.revoked_at),
        "revoked_by": grant.revoked_by_label,
        "revoke_reason": grant.revoke_reason,
        "access_request": (
            {
                "id": requests[0].pk,
                "justification": requests[0].justification,
                "decided_by": requests[0].decided_by_label,
                "decided_at": iso(requests[0].decided_at),
            }
            if requests
            else None
        ),
    }


def access_ends(expiries: Iterable[Moment_T | None]) -> Moment_T | None:
    """When access through grants with these expiries ends (datetimes or POSIX seconds): never
    (None) if one never expires, else the latest; None for no grants at all."""
    ends = list(expiries)
    if any(end is None for end in ends):
        return None
    return max((end for end in ends if end is not None), default=None)
