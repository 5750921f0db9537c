"""Which pooled upstream session a gateway call uses, and what becomes of the tools a session
lists when it opens or hears they changed."""

from __future__ import annotations

import hashlib
from typing import Any

from registry.gateway import port
from registry.gateway.port import UPSTREAM_ACCOUNT_NEEDS_PERSON, CallTarget, IsolationScope
from workers.gateway.outcomes import ToolroomUnavailable
from workers.gateway.registry_calls import in_thread


async def definitions_checked(
    server_id: int, tools: list[dict[str, Any]], seen_by: str
) -> list[str]:
    """What a pooled session listed (on open, or told its tools changed), compared with the
    approved definitions by the registry (workers/definitions.py); the tools whose approval
    ended."""
    return await in_thread(
        port.tool_definitions_drift, server_id=server_id, tools=tools, actor=f"gateway:{seen_by}"
    )


def isolation_key(
    target: CallTarget, *, team_id: int, conversation: str, person_id: int | None = None
) -> str:
    """Which callers share an upstream session. A per-person server's session belongs to one
    person (it carries their own token): never shared, whatever the isolation scope says."""
    scope = target.policy.isolation_scope
    if target.per_person:
        if person_id is None:  # the upstream_account rule refuses agents before this
            raise ToolroomUnavailable(
                UPSTREAM_ACCOUNT_NEEDS_PERSON, "an agent token cannot call a per-person server."
            )
        if scope == IsolationScope.CONVERSATION:
            digest = hashlib.sha256(conversation.encode()).hexdigest()[:24]
            return f"person:{person_id}:conversation:{digest}"
        return f"person:{person_id}"
    if scope == IsolationScope.SHARED:
        return "shared"
    if scope == IsolationScope.CONVERSATION:
        # The team too: a conversation's session may mount its team's storage.
        digest = hashlib.sha256(conversation.encode()).hexdigest()[:24]
        return f"conversation:{team_id}:{digest}"
    return f"team:{team_id}"
