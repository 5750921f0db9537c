"""Every change to teams, memberships, roles, grants, access requests and agent tokens.

More: docs/authentication.md, "Module notes".
"""

from registry.teams.services.access_requests import (
    BulkDecisionResult,
    access_request_approve,
    access_request_create,
    access_request_deny,
    access_request_waiting_for,
    access_request_withdraw,
    access_requests_decide_bulk,
)
from registry.teams.services.grants import (
    grant_create,
    grant_revoke,
)
from registry.teams.services.teams import (
    DEFAULT_ROLES,
    membership_roles,
    role_create,
    role_update,
    team_create,
    team_delete,
    team_member_remove,
    team_member_set,
    team_ratchet_window_set,
    team_tool_exposure_set,
    team_update,
)
from registry.teams.services.tokens import (
    CreatedToken,
    agent_token_create,
    agent_token_declare_servers,
    agent_token_revoke,
    agent_token_tool_exposure_set,
)

__all__ = [
    "DEFAULT_ROLES",
    "BulkDecisionResult",
    "CreatedToken",
    "access_request_approve",
    "access_request_create",
    "access_request_deny",
    "access_request_waiting_for",
    "access_request_withdraw",
    "access_requests_decide_bulk",
    "agent_token_create",
    "agent_token_declare_servers",
    "agent_token_revoke",
    "agent_token_tool_exposure_set",
    "grant_create",
    "grant_revoke",
    "membership_roles",
    "role_create",
    "role_update",
    "team_create",
    "team_delete",
    "team_member_remove",
    "team_member_set",
    "team_ratchet_window_set",
    "team_tool_exposure_set",
    "team_update",
]
