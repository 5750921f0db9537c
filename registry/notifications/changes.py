"""Change notices: the people concerned hear when something their teams use stops being usable
(a tool whose definition changed upstream, a server suspended or retired) or is about to (a
grant that ends within GRANT_EXPIRY_NOTICE), through the same transactional outbox as access
requests (registry/notifications/services.py).

More: docs/notifications.md, "Module notes".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from registry.core import task_queue
from registry.notifications.models import EmailNotification, WebhookDelivery, WebhookEndpoint
from registry.servers.models import McpServer, Tool
from registry.teams.models import Grant, Membership, MembershipLevel, Team

TOOL_CHANGED = "tool.definition_changed"
SERVER_SUSPENDED = "server.suspended"
SERVER_RETIRED = "server.retired"
GRANT_EXPIRING = "grant.expiring"
CHANGE_EVENTS = (TOOL_CHANGED, SERVER_SUSPENDED, SERVER_RETIRED, GRANT_EXPIRING)
TOOL_DECIDERS = "servers.approve_tool"
SERVER_DECIDERS = "servers.change_mcpserver"
GRANT_EXPIRY_NOTICE = timedelta(days=14)  # the portal's "Access ending soon" too


def _absolute(path: str) -> str:
    base = settings.TOOLROOM_PUBLIC_URL or "http://127.0.0.1:8000"
    return base.rstrip("/") + path


def staff_addresses(permission: str) -> list[str]:
    """Active staff holding `permission` (superusers included) who have an address."""
    users = get_user_model()._default_manager.with_perm(
        permission, include_superusers=True, backend="django.contrib.auth.backends.ModelBackend"
    )
    found = users.filter(is_staff=True, is_active=True).exclude(email="").order_by("pk")
    return list(dict.fromkeys(found.values_list("email", flat=True)))


def owner_addresses(team: Team) -> list[str]:
    """The team's active owners who have an address."""
    found = (
        Membership.objects.filter(team=team, level=MembershipLevel.OWNER, user__is_active=True)
        .exclude(user__email="")
        .order_by("user__pk")
    )
    return list(dict.fromkeys(found.values_list("user__email", flat=True)))


def _email(event: str, subject: str, body: str, recipients: Sequence[str]) -> None:
    if not recipients:
        return
    row = EmailNotification.objects.create(
        event=event, subject=subject[:300], body=body, recipients=list(recipients)
    )
    task_queue.enqueue(task_queue.NOTIFICATION_EMAIL, args=[row.pk])


def _webhooks(event: str, payloads: dict[Team | None, dict[str, Any]]) -> None:
    """One delivery per active endpoint: global endpoints get payloads[None], a team's
    endpoints that team's payload (and nothing when the team is not concerned)."""
    teams = {team.pk: team for team in payloads if team is not None}
    endpoints = WebhookEndpoint.objects.filter(is_active=True).filter(
        Q(team__isnull=True) | Q(team_id__in=list(teams))
    )
    now = timezone.now().isoformat()
    deliveries = []
    for endpoint in endpoints:
        team = teams.get(endpoint.team_id) if endpoint.team_id is not None else None
        payload = {"event": event, "sent_at": now, **payloads[team]}
        deliveries.append(
            WebhookDelivery.objects.create(endpoint=endpoint, event=event, payload=payload)
        )
    for delivery in deliveries:
        task_queue.enqueue(task_queue.WEBHOOK_DELIVER, args=[delivery.pk])


# --- A tool changed upstream ---------------------------------------------------------------------


def tools_changed_outbox(*, server: McpServer, changes: Sequence[tuple[Tool, str, str]]) -> None:
    """Approved tools of `server` changed their definitions (tool, approved hash, new hash) and
    lost their approval: tell the tool deciders and the owners of the teams that held them.
    Call it inside the sync's transaction."""
    if not changes:
        return
    hashes = {tool.pk: (approved, new) for tool, approved, new in changes}
    names = {tool.pk: tool.name for tool, _, _ in changes}
    held: dict[int, set[int]] = defaultdict(set)  # team -> tools it held
    grants = Grant.objects.active().filter(server=server)
    for team_id, tool_id in grants.filter(
        Q(tool__isnull=True) | Q(tool_id__in=list(names))
    ).values_list("team_id", "tool_id"):
        held[team_id].update(names if tool_id is None else {tool_id})
    teams = list(Team.objects.filter(pk__in=list(held)).order_by("slug"))

    def tool_rows(tool_ids: Iterable[int]) -> list[dict[str, str]]:
        return [
            {
                "name": names[pk],
                "approved_definition_hash": hashes[pk][0],
                "definition_hash": hashes[pk][1],
            }
            for pk in sorted(tool_ids, key=lambda pk: names[pk])
        ]

    def payload(team: Team | None) -> dict[str, Any]:
        chosen = held[team.pk] if team is not None else set(names)
        return {
            "server": server.slug,
            "tools": tool_rows(chosen),
            "teams": [team.slug] if team is not None else [t.slug for t in teams],
        }

    _webhooks(TOOL_CHANGED, {None: payload(None), **{team: payload(team) for team in teams}})
    tools = tool_rows(names)
    admin_url = _absolute(reverse("admin:servers_mcpserver_change", args=[server.pk]))
    _email(
        TOOL_CHANGED,
        f"[Toolroom] {server.name} changed {len(tools)} approved tool(s): review needed",
        render_to_string(
            "notifications/tools_changed_admins.txt",
            {"server": server, "tools": tools, "teams": teams, "admin_url": admin_url},
        ),
        staff_addresses(TOOL_DECIDERS),
    )
    for team in teams:
        team_tools = tool_rows(held[team.pk])
        _email(
            TOOL_CHANGED,
            f"[Toolroom] {team.name}: {len(team_tools)} tool(s) of {server.name} changed "
            "upstream, waiting for review",
            render_to_string(
                "notifications/tools_changed_owners.txt",
                {
                    "server": server,
                    "team": team,
                    "tools": team_tools,
                    "portal_url": _absolute(reverse("portal:team", args=[team.slug])),
                },
            ),
            owner_addresses(team),
        )


# --- A server suspended or retired ---------------------------------------------------------------


def server_unavailable_outbox(*, server: McpServer, event: str, reason: str) -> None:
    """`server` was suspended or retired (event SERVER_SUSPENDED or SERVER_RETIRED): tell the
    server deciders and the owners of the teams with an active grant on it."""
    teams = list(
        Team.objects.filter(
            pk__in=Grant.objects.active().filter(server=server).values("team_id")
        ).order_by("slug")
    )
    word = "suspended" if event == SERVER_SUSPENDED else "retired"

    def payload(team: Team | None) -> dict[str, Any]:
        return {
            "server": server.slug,
            "review_status": server.review_status,
            "reason": reason or None,
            "teams": [team.slug] if team is not None else [t.slug for t in teams],
        }

    _webhooks(event, {None: payload(None), **{team: payload(team) for team in teams}})
    context = {"server": server, "word": word, "reason": reason, "teams": teams}
    _email(
        event,
        f"[Toolroom] {server.name} was {word}",
        render_to_string(
            "notifications/server_unavailable.txt",
            {
                **context,
                "link": _absolute(reverse("admin:servers_mcpserver_change", args=[server.pk])),
            },
        ),
        staff_addresses(SERVER_DECIDERS),
    )
    for team in teams:
        _email(
            event,
            f"[Toolroom] {team.name}: {server.name} was {word}",
            render_to_string(
                "notifications/server_unavailable.txt",
                {
                    **context,
                    "team": team,
                    "link": _absolute(reverse("portal:team", args=[team.slug])),
                },
            ),
            owner_addresses(team),
        )


# --- Access about to end -----------------------------------------------------------------------


def grants_expiring_notify(*, within: timedelta = GRANT_EXPIRY_NOTICE) -> int:
    """Tell each team's owners, once per grant and end, about the active grants that end within
    `within` (the beat runs it hourly). Returns how many grants were told about."""
    now = timezone.now()
    with transaction.atomic():
        grants = list(
            Grant.objects.active(now)
            .filter(expires_at__lte=now + within, expiry_notice_sent_at__isnull=True)
            .select_for_update(skip_locked=True, of=("self",))
            .select_related("team", "server", "tool", "role")
            .order_by("team__slug", "expires_at")
        )
        by_team: dict[int, list[Grant]] = defaultdict(list)
        for grant in grants:
            by_team[grant.team_id].append(grant)
        for team_grants in by_team.values():
            team = team_grants[0].team
            rows = [
                {
                    "id": grant.pk,
                    "server": grant.server.slug,
                    "tool": grant.tool.name if grant.tool else None,
                    "role": grant.role.name if grant.role else None,
                    "expires_at": grant.expires_at.isoformat() if grant.expires_at else None,
                }
                for grant in team_grants
            ]
            payload = {"team": team.slug, "grants": rows}
            _webhooks(GRANT_EXPIRING, {None: payload, team: payload})
            _email(
                GRANT_EXPIRING,
                f"[Toolroom] {team.name}: access ending soon",
                render_to_string(
                    "notifications/grants_expiring.txt",
                    {
                        "team": team,
                        "grants": team_grants,
                        "portal_url": _absolute(reverse("portal:requests", args=[team.slug])),
                    },
                ),
                owner_addresses(team),
            )
        Grant.objects.filter(pk__in=[grant.pk for grant in grants]).update(
            expiry_notice_sent_at=now
        )
    return len(grants)
