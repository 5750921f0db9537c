"""The auditors' export of `team_access_report`: one flat row per (role, tool, grant behind it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from registry.access.explain import AccessExplanation
from registry.access.rules import (
    RULE_APPROVAL,
    RULE_GATEWAY_MODE,
    RULE_GRANT,
    RULE_HEALTH,
    RULE_ROLE_CLASS,
    RULE_SERVER_REVIEW,
)

ACCESS_REPORT_COLUMNS = (
    "team",
    "role",
    "name",
    "server",
    "tool",
    "permission_class",
    "callable",
    "refused_at_call_time",
    "grant_id",
    "grant_scope",
    "grant_role",
    "grant_expires_at",
    "granted_by",
    "granted_at",
    "access_request_id",
    "access_ends_at",
    "approved_definition_hash",
    "current_definition_hash",
    "definition_matches",
    "approver",
    "approved_at",
    "approval_note",
    "findings_acknowledged",
    "server_review_status",
    "health",
    "gateway_mode",
    "isolation_scope",
)


def access_report_rows(explanations: Iterable[AccessExplanation]) -> list[dict[str, Any]]:
    """One flat row per (role, tool, grant behind it): the CSV form of `team_access_report`."""
    rows = []
    for explanation in explanations:
        grant_rule = explanation.rule(RULE_GRANT).facts
        approval_rule = explanation.rule(RULE_APPROVAL).facts
        approval = approval_rule["approval"] or {}
        gateway = explanation.rule(RULE_GATEWAY_MODE).facts
        failure = explanation.first_failure
        common = {
            "team": explanation.team_slug,
            "role": explanation.role_name,
            "name": explanation.name,
            "server": explanation.server_slug,
            "tool": explanation.tool_name,
            "permission_class": explanation.rule(RULE_ROLE_CLASS).facts["tool_class"],
            "callable": explanation.callable,
            "refused_at_call_time": failure.code if failure is not None else "",
            "access_ends_at": grant_rule["access_ends_at"] or "",
            "approved_definition_hash": approval_rule["approved_definition_hash"] or "",
            "current_definition_hash": approval_rule["current_definition_hash"],
            "definition_matches": approval_rule["current_definition_matches"],
            "approver": approval.get("approver", ""),
            "approved_at": approval.get("approved_at", ""),
            "approval_note": approval.get("note", ""),
            "findings_acknowledged": approval.get("findings_acknowledged", 0),
            "server_review_status": explanation.rule(RULE_SERVER_REVIEW).facts["review_status"],
            "health": explanation.rule(RULE_HEALTH).facts["health"],
            "gateway_mode": gateway["mode"],
            "isolation_scope": gateway["isolation_scope"],
        }
        for grant in grant_rule["grants"] or [{}]:
            request = grant.get("access_request") or {}
            rows.append(
                {
                    **common,
                    "grant_id": grant.get("id", ""),
                    "grant_scope": grant.get("scope", ""),
                    "grant_role": grant.get("role") or ("" if not grant else "(every role)"),
                    "grant_expires_at": grant.get("expires_at") or "",
                    "granted_by": grant.get("granted_by", ""),
                    "granted_at": grant.get("granted_at", ""),
                    "access_request_id": request.get("id", ""),
                }
            )
    return [{column: row[column] for column in ACCESS_REPORT_COLUMNS} for row in rows]
