"""Resources and prompts of the servers an agent may use, namespaced like tools.

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from registry.access.rule_types import HIDDEN, Kind, Moment, Refusal, ToolFacts
from registry.access.rules import (
    CALL_TIME_RULES,
    CATALOGUE_RULES,
    UNKNOWN_TOOL,
    first_refusal,
)
from registry.catalogue.naming import (
    namespaced_tool_name,
    namespaced_uri,
    namespaced_uri_template,
    resource_uri_parts,
)
from registry.catalogue.uri_templates import template_matches, template_pattern
from registry.core.process_cache import VersionedCache
from registry.gateway.checks import CallTable, CallTarget, call_table, gateway_policy_of
from registry.servers.gateway_policy import GatewayMode
from registry.servers.models import (
    ApprovalState,
    CircuitState,
    Health,
    McpServer,
    ServerPrompt,
    ServerResource,
)
from registry.teams.callers import Caller

_MAX = 4096


@dataclass(frozen=True)
class ContentEntry:
    target: CallTarget  # the server, as a read-class call target
    upstream: str  # the server's own URI or prompt name
    listing: dict[str, Any]  # the MCP list entry, namespaced
    facts: ToolFacts | None = None  # what the access rules decide on
    refusal: Refusal | None = None  # a catalogue rule's (not listed; reading it is refused)


@dataclass(frozen=True)
class TemplateEntry:
    target: CallTarget
    upstream: str  # the server's own URI template
    pattern: re.Pattern[str]  # what the server's URIs expanded from it look like
    listing: dict[str, Any]  # the MCP resource template entry, namespaced
    facts: ToolFacts | None = None
    refusal: Refusal | None = None


@dataclass
class AgentContent:
    version: int
    ratchet_seconds: int = 0
    resources: dict[str, ContentEntry] = field(default_factory=dict)
    prompts: dict[str, ContentEntry] = field(default_factory=dict)
    templates: list[TemplateEntry] = field(default_factory=list)

    def listed_resources(self) -> list[dict[str, Any]]:
        return [entry.listing for entry in self.resources.values() if entry.refusal is None]

    def listed_templates(self) -> list[dict[str, Any]]:
        return [entry.listing for entry in self.templates if entry.refusal is None]

    def listed_prompts(self) -> list[dict[str, Any]]:
        return [entry.listing for entry in self.prompts.values() if entry.refusal is None]


def content_refusal(
    entry: ContentEntry, *, identity: Caller, at: float | None = None
) -> Refusal | None:
    """Whether the caller may read this resource or get this prompt now: the catalogue rules'
    refusal kept when the list was built, else the call rules' (grant expiry, gateway mode,
    circuit, ratchet), evaluated now like a tool call's."""
    if entry.refusal is not None:
        return entry.refusal
    if entry.facts is None:
        return None
    moment = Moment(now=time.time() if at is None else at, caller=identity)
    return first_refusal(CALL_TIME_RULES, entry.facts, moment)


def resource_lookup(content: AgentContent, uri: str) -> ContentEntry | None:
    """What reading a namespaced URI reads: a listed resource, or a URI expanded from a listed
    template of that server (the server's URI must match the template); else None."""
    entry = content.resources.get(uri)
    if entry is not None:
        return entry
    parts = resource_uri_parts(uri)
    if parts is None:
        return None
    slug, upstream = parts
    for template in content.templates:
        if template.target.server_slug == slug and template_matches(
            template.upstream, template.pattern, upstream
        ):
            return ContentEntry(
                template.target, upstream, {"uri": uri}, template.facts, template.refusal
            )
    return None


_contents: VersionedCache[tuple[int, int], AgentContent] = VersionedCache(
    "resources and prompts", limit=_MAX
)


_SERVER_FIELDS = (
    "pk",
    "slug",
    "transport",
    "isolation",
    "data_sensitivity",
    "review_status",
    "upstream_auth",
    "status__health",
    "status__circuit_state",
    "gateway_policy__mode",
    "gateway_policy__isolation_scope",
    "gateway_policy__call_deadline_seconds",
    "gateway_policy__max_call_seconds",
    "gateway_policy__max_concurrency",
    "gateway_policy__queue_limit",
    "gateway_policy__idle_stop_seconds",
    "gateway_policy__pass_identity",
    "gateway_policy__keep_arguments",
)


def _server_items(table: CallTable) -> dict[int, tuple[CallTarget, ToolFacts]]:
    """Each server granted whole to the role, as a read-class call target and the facts its
    resources and prompts share (one query)."""
    servers: dict[int, tuple[CallTarget, ToolFacts]] = {}
    rows = McpServer.objects.filter(pk__in=list(table.server_access)).values(*_SERVER_FIELDS)
    for values in rows:
        row = {f"server__{name}": value for name, value in values.items()}
        circuit = row["server__status__circuit_state"] or CircuitState.CLOSED
        target = CallTarget(
            name="",
            server_id=values["pk"],
            server_slug=values["slug"],
            transport=values["transport"],
            sandboxed=values["isolation"] == "sandbox",
            tool_id=0,
            tool_name="",
            definition_hash="",
            permission_class="read",
            data_sensitivity=values["data_sensitivity"],
            input_schema={},
            policy=gateway_policy_of(row),
            circuit_open=circuit == CircuitState.OPEN,
            access_expires_at=table.server_access[values["pk"]],
            upstream_auth=values["upstream_auth"] or "shared",
        )
        facts = ToolFacts(
            name="",
            server_slug=values["slug"],
            granted=True,
            access_ends_at=table.server_access[values["pk"]],
            offered=True,
            review_status=values["review_status"],
            approval_state=ApprovalState.APPROVED,
            approved_definition_hash="",
            definition_hash="",
            permission_class="read",
            role_name=table.role_name,
            role_classes=table.permission_classes,
            health=row["server__status__health"] or Health.UNKNOWN,
            hide_unhealthy=table.hide_unhealthy,
            gateway_mode=row["server__gateway_policy__mode"] or GatewayMode.ON_DEMAND,
            circuit_state=circuit,
            upstream_auth=target.upstream_auth,
        )
        servers[values["pk"]] = (target, facts)
    return servers


def _judged(
    facts: ToolFacts, *, kind: str, name: str, row: dict[str, Any]
) -> tuple[ToolFacts, Refusal | None]:
    """The item's facts (its own review: approved at a definition hash, awaiting approval, or
    hidden) and the refusal of the first catalogue rule that refuses it, if any."""
    item = replace(
        facts,
        name=name,
        kind=kind,
        offered=row["review_state"] != HIDDEN,  # reads like one the server does not have
        approval_state=row["review_state"],
        approved_definition_hash=row["approved_definition_hash"],
        definition_hash=row["definition_hash"],
    )
    return item, first_refusal(CATALOGUE_RULES, item, Moment(now=time.time()))


# Each item's review, what the tool_approval rule decides on for it.
_REVIEW = ("review_state", "approved_definition_hash", "definition_hash")


def agent_content(*, identity: Caller) -> AgentContent:
    """The resources and prompts the agent may use now; no query while the version holds."""
    table = call_table(team_id=identity.team_id, role_id=identity.role_id)
    key = (identity.team_id, identity.role_id)
    content = _contents.get(key, table.version)
    if content is not None:
        return content
    servers = _server_items(table)
    content = AgentContent(version=table.version, ratchet_seconds=table.ratchet_seconds)
    resources: list[Any] = list(
        ServerResource.objects.filter(server_id__in=list(servers))
        .order_by("pk")  # a URI two templates match is read through the older one
        .values(
            "server_id", "uri", "name", "title", "description", "mime_type", "is_template", *_REVIEW
        )
    )
    prompts: list[Any] = list(
        ServerPrompt.objects.filter(server_id__in=list(servers)).values(
            "server_id", "name", "title", "description", "arguments", *_REVIEW
        )
    )
    for row in resources:
        target, server_facts = servers[row["server_id"]]
        template = row["is_template"]
        uri = (namespaced_uri_template if template else namespaced_uri)(
            target.server_slug, row["uri"]
        )
        listing: dict[str, Any] = {
            "uriTemplate" if template else "uri": uri,
            "name": namespaced_tool_name(target.server_slug, row["name"] or "resource"),
        }
        for field_name, key_name in (
            ("title", "title"),
            ("description", "description"),
            ("mime_type", "mimeType"),
        ):
            if row[field_name]:
                listing[key_name] = row[field_name]
        facts, refusal = _judged(server_facts, kind=Kind.RESOURCE, name=uri, row=row)
        if refusal is not None and refusal.code == UNKNOWN_TOOL:
            continue  # reads like a resource never offered
        if template:
            content.templates.append(
                TemplateEntry(
                    target, row["uri"], template_pattern(row["uri"]), listing, facts, refusal
                )
            )
        else:
            content.resources[uri] = ContentEntry(target, row["uri"], listing, facts, refusal)
    for row in prompts:
        target, server_facts = servers[row["server_id"]]
        name = namespaced_tool_name(target.server_slug, row["name"])
        listing = {"name": name, "arguments": row["arguments"] or []}
        for field_name in ("title", "description"):
            if row[field_name]:
                listing[field_name] = row[field_name]
        facts, refusal = _judged(server_facts, kind=Kind.PROMPT, name=name, row=row)
        if refusal is not None and refusal.code == UNKNOWN_TOOL:
            continue
        content.prompts[name] = ContentEntry(target, row["name"], listing, facts, refusal)
    return _contents.put(key, content, table.version)
