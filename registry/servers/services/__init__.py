"""Every state change of servers and tools: each validates, runs in a transaction, and audits.

Admin actions, the API, management commands and worker tasks all call these; none of them
changes a server's review status or a tool's approval by itself.

One module per entity (servers, review decisions, tool approvals, the review of resources and
prompts, categories); this package
re-exports their services, so callers write `services.<name>`.
"""

from registry.servers.services.categories import (
    category_create,
    category_update,
)
from registry.servers.services.items import (
    ITEM_ACTIONS,
    ITEM_MODELS,
    BulkItemResult,
    item_approve,
    item_hide,
    item_kind,
    item_unhide,
    items_review_bulk,
)
from registry.servers.services.servers import (
    CATALOGUE_FIELDS,
    EGRESS_FIELDS,
    LAUNCH_FIELDS,
    REVIEWED_STATUSES,
    RUNTIME_FIELDS,
    SECRET_FIELDS,
    SERVER_EDITABLE_FIELDS,
    VOUCH_PERMISSION,
    actor_may_vouch,
    secrets_drop_on_retarget,
    server_create,
    server_update,
    vouch_reasons,
    vouch_refusal,
)
from registry.servers.services.tools import (
    BulkApprovalResult,
    tool_approve,
    tool_revoke,
    tool_set_permission_class,
    tools_approve_bulk,
)
from registry.servers.services.transitions import (
    TRANSITIONS,
    Transition,
    server_approve,
    server_decide,
    server_reject,
    server_resume,
    server_retire,
    server_submit_and_approve,
    server_submit_for_review,
    server_suspend,
    server_transition_allowed,
)

__all__ = [
    "CATALOGUE_FIELDS",
    "EGRESS_FIELDS",
    "ITEM_ACTIONS",
    "ITEM_MODELS",
    "LAUNCH_FIELDS",
    "REVIEWED_STATUSES",
    "RUNTIME_FIELDS",
    "SECRET_FIELDS",
    "SERVER_EDITABLE_FIELDS",
    "TRANSITIONS",
    "VOUCH_PERMISSION",
    "BulkApprovalResult",
    "BulkItemResult",
    "Transition",
    "actor_may_vouch",
    "category_create",
    "category_update",
    "item_approve",
    "item_hide",
    "item_kind",
    "item_unhide",
    "items_review_bulk",
    "secrets_drop_on_retarget",
    "server_approve",
    "server_create",
    "server_decide",
    "server_reject",
    "server_resume",
    "server_retire",
    "server_submit_and_approve",
    "server_submit_for_review",
    "server_suspend",
    "server_transition_allowed",
    "server_update",
    "tool_approve",
    "tool_revoke",
    "tool_set_permission_class",
    "tools_approve_bulk",
    "vouch_reasons",
    "vouch_refusal",
]
