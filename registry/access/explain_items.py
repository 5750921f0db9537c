"""Why a team's agent of a role can (or cannot) read a server's resource or get its prompt:
`item_explain`, the same rules and the same evaluation as a tool's (registry/access/explain.py).

More: docs/access.md, "Resources and prompts are approved one by one".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from registry.access.explain import (
    AccessExplanation,
    access_explain,
    grant_is_active,
    grants_with_requests,
    rule_results,
)
from registry.access.grant_facts import access_ends
from registry.access.rule_types import HIDDEN, Kind, ToolFacts, ToolRecord
from registry.access.rules import server_health_and_circuit
from registry.catalogue.naming import (
    namespaced_tool_name,
    namespaced_uri,
    namespaced_uri_template,
    plain_name_parts,
    resource_uri_parts,
)
from registry.catalogue.uri_templates import template_matches, template_pattern
from registry.servers.gateway_policy import GatewayMode, ServerGatewayPolicy
from registry.servers.models import ReviewStatus, ServerPrompt, ServerResource, Tool
from registry.teams.callers import Caller
from registry.teams.models import Grant, Team, TeamRole

Item = ServerResource | ServerPrompt
# The kinds of item, as the explain API's parameters name them.
ITEM_KINDS = (Kind.RESOURCE, Kind.PROMPT)


def item_agent_name(item: Item) -> str:
    """What agents call the item through the gateway: a resource's (or template's) toolroom://
    URI as `resources/list` (`resources/templates/list`) gives it, a prompt's namespaced name."""
    slug = item.server.slug
    if isinstance(item, ServerPrompt):
        return namespaced_tool_name(slug, item.name)
    return (namespaced_uri_template if item.is_template else namespaced_uri)(slug, item.uri)


def _candidates(kind: str, name: str) -> QuerySet[ServerResource] | QuerySet[ServerPrompt]:
    """The items that may bear this name (narrowed by the name's parts where it has them)."""
    if kind == Kind.RESOURCE:
        parts = resource_uri_parts(name)
        if parts is None:
            return ServerResource.objects.none()
        return ServerResource.objects.filter(server__slug=parts[0], uri=parts[1])
    prompts = ServerPrompt.objects.all()
    plain = plain_name_parts(name)
    if plain is not None:  # one row at most; a hashed name is matched against them all
        prompts = prompts.filter(server__slug=plain[0], name=plain[1])
    return prompts


def _named(items: QuerySet[ServerResource] | QuerySet[ServerPrompt], name: str) -> Item | None:
    for item in items.select_related("server", "server__status").order_by("pk").iterator():
        if item_agent_name(item) == name:
            return item
    return None


def _expanded_from(templates: QuerySet[ServerResource], name: str) -> ServerResource | None:
    """The template a concrete URI is read through, as the gateway's `resource_lookup` picks it:
    of the URI's server, the oldest template (by primary key) the server's URI is an expansion of
    (`template_matches`, RFC 6570)."""
    parts = resource_uri_parts(name)
    if parts is None:
        return None
    slug, upstream = parts
    found = (
        templates.filter(server__slug=slug, is_template=True)
        .select_related("server", "server__status")
        .order_by("pk")
    )
    for template in found.iterator():
        if template_matches(template.uri, template_pattern(template.uri), upstream):
            return template
    return None


def expansion_of(item: Item, name: str) -> str:
    """`name` when it is a concrete URI read through the template `item` (the agents' name asked
    about is not the item's own), else ''."""
    return name if isinstance(item, ServerResource) and item_agent_name(item) != name else ""


def item_by_name(*, kind: str, name: str) -> Item | None:
    """Any resource or prompt (hidden or not, any server) by its agents' name: for admins. A
    concrete URI no resource has is matched against the server's templates like the gateway
    does (hidden ones last: the gateway skips them)."""
    item = _named(_candidates(kind, name), name)
    if item is not None or kind != Kind.RESOURCE:
        return item
    templates = ServerResource.objects.all()
    return _expanded_from(templates.exclude(review_state=HIDDEN), name) or _expanded_from(
        templates.filter(review_state=HIDDEN), name
    )


def item_for_agent_name(
    *, team: Team, kind: str, name: str, at: datetime | None = None
) -> Item | None:
    """The resource or prompt behind an agents' name that the team may ask about, or None.

    As for a tool (`tool_for_agent_name`): an item of an approved server (any team can browse
    those) or of a server the team's grants cover (only a grant of the whole server covers its
    resources and prompts); a hidden item reads like one the server does not have. A concrete
    URI no resource has is the template the gateway reads it through (`_expanded_from`), if any.
    Anything else answers None, exactly like a name that does not exist.
    """
    granted = Grant.objects.active(at or timezone.now()).filter(team=team, tool__isnull=True)
    visible = Q(server__review_status=ReviewStatus.APPROVED) | Q(
        server_id__in=granted.values("server_id")
    )
    item = _named(_candidates(kind, name).exclude(review_state=HIDDEN).filter(visible), name)
    if item is not None or kind != Kind.RESOURCE:
        return item
    return _expanded_from(ServerResource.objects.exclude(review_state=HIDDEN).filter(visible), name)


def item_names_to_pick(*, kind: str, team: Team | None = None, limit: int = 2000) -> list[str]:
    """The names a "Why (not)?" picker offers for this kind (two queries): for a team, those it
    may ask about (as `item_for_agent_name`); for the admin (team None), every item. At most
    `limit`; the field takes any name."""
    items: QuerySet[ServerResource] | QuerySet[ServerPrompt] = (
        ServerResource.objects.all() if kind == Kind.RESOURCE else ServerPrompt.objects.all()
    )
    if team is not None:
        granted = Grant.objects.active().filter(team=team, tool__isnull=True)
        items = items.exclude(review_state=HIDDEN).filter(
            Q(server__review_status=ReviewStatus.APPROVED)
            | Q(server_id__in=granted.values("server_id"))
        )
    ordered = items.select_related("server").order_by("server__slug", "pk")[:limit]
    return [item_agent_name(item) for item in ordered]


def item_facts_of(record: ToolRecord) -> ToolFacts:
    """The facts the rules decide on for a resource or prompt, as the explanation's rows give
    them: those the gateway's content builds (registry.gateway.content) from its own rows."""
    item, server = record.item, record.server
    if item is None:
        raise ValueError("Not the record of a resource or a prompt.")
    health, circuit = server_health_and_circuit(server)
    ends = access_ends([grant.expires_at for grant in record.applying])
    return ToolFacts(
        name=item_agent_name(item),
        server_slug=server.slug,
        granted=bool(record.applying),
        access_ends_at=ends.timestamp() if record.applying and ends is not None else None,
        # Discovery forgets an item the server no longer lists; a hidden one reads like that.
        offered=item.review_state != HIDDEN,
        review_status=server.review_status,
        approval_state=item.review_state,
        approved_definition_hash=item.approved_definition_hash,
        definition_hash=item.definition_hash,
        permission_class="read",
        role_name=record.role.name,
        role_classes=tuple(record.role.permission_classes),
        health=health,
        hide_unhealthy=record.hide_unhealthy,
        gateway_mode=record.policy.mode if record.policy else GatewayMode.ON_DEMAND,
        circuit_state=circuit,
        upstream_auth=server.upstream_auth,
        kind=record.kind,
    )


def item_explain(
    *,
    team: Team,
    role: TeamRole,
    item: Item,
    caller: Caller | None = None,
    at: datetime | None = None,
    expanded_uri: str = "",
) -> AccessExplanation:
    """Whether the team's agent of this role can read the resource (or get the prompt), rule
    by rule, with the facts: the rules a tool goes through, with the item's kind (four queries).

    `caller`: the token (or person) the caller rules' live checks read, as for a tool.
    `expanded_uri`: the concrete URI asked about, read through this template (`expansion_of`).
    """
    if role.team_id != team.pk:
        raise ValueError("The role is not one of the team's roles.")
    now = at or timezone.now()
    model = type(item)
    item = model.objects.select_related("server", "server__status").get(pk=item.pk)
    policy = ServerGatewayPolicy.objects.filter(server_id=item.server_id).first()
    # Only a grant of the whole server covers its resources and prompts.
    grants = [
        grant
        for grant in grants_with_requests(Q(team_id=team.pk), [item.server_id])
        if grant.tool_id is None
    ]
    mine = [grant for grant in grants if grant.role_id in (None, role.pk)]
    record = ToolRecord(
        tool=None,
        item=item,
        role=role,
        policy=policy,
        approval=None,
        applying=[grant for grant in mine if grant_is_active(grant, now)],
        other_roles=[g for g in grants if g not in mine and grant_is_active(g, now)],
        lapsed=[grant for grant in mine if not grant_is_active(grant, now)],
        at=now,
        hide_unhealthy=settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY,
        caller=caller,
    )
    facts = item_facts_of(record)
    return AccessExplanation(
        team_id=team.pk,
        team_slug=team.slug,
        role_id=role.pk,
        role_name=role.name,
        tool_id=item.pk,
        tool_name=item.uri if isinstance(item, ServerResource) else item.name,
        server_slug=item.server.slug,
        name=facts.name,
        at=now,
        rules=rule_results(record, facts),
        kind=record.kind,
        expanded_uri=expanded_uri,
    )


def asked_about(query: Mapping[str, str]) -> tuple[str, str]:
    """What a "Why (not)?" page is asked about: the kind (`tool`, `resource`, `prompt`: the first
    of those parameters given) and the name, stripped; ('tool', '') when none is given."""
    kind, name = next(
        ((kind, value) for kind in (Kind.TOOL, *ITEM_KINDS) if (value := query.get(kind))),
        (Kind.TOOL, ""),
    )
    return kind, name.strip()


def explain_for_roles(
    *, team: Team, subject: Tool | Item | None, name: str
) -> list[AccessExplanation]:
    """The team's access to a tool, resource or prompt (`subject`, found by `name`; none: no
    explanation), for each of its roles by name: `access_explain` or `item_explain` (with the
    concrete URI asked about when `name` is read through the template `subject`)."""
    if subject is None:
        return []
    roles = team.roles.order_by("name")
    if isinstance(subject, Tool):
        return [access_explain(team=team, role=role, tool=subject) for role in roles]
    expanded = expansion_of(subject, name)
    return [
        item_explain(team=team, role=role, item=subject, expanded_uri=expanded) for role in roles
    ]
