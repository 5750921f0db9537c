"""The admin's search: servers, tools, teams and people matching a few words, from the index.

It lives in the teams app because it spans servers, tools, teams and accounts, and teams sits
above servers in the import order. Each kind is searched only for someone who may view it."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from operator import and_
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from registry.servers.models import McpServer, Tool
from registry.teams.models import Team

RESULTS_PER_KIND = 20


@dataclass(frozen=True)
class Hit:
    label: str
    detail: str
    url: str


@dataclass
class HitGroup:
    key: str
    title: str
    hits: list[Hit] = field(default_factory=list)
    more: bool = False
    list_url: str = ""


def _matching(rows: QuerySet[Any], words: list[str], fields: list[str]) -> QuerySet[Any]:
    """Rows where every word is in one of the fields (as the admin's own search does)."""
    each = [
        reduce(lambda a, b: a | b, (Q(**{f"{f}__icontains": w}) for f in fields)) for w in words
    ]
    return rows.filter(reduce(and_, each)) if each else rows.none()


def _change_url(obj: Model) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])


def admin_search(*, user: Any, query: str) -> list[HitGroup]:
    """What matches `query`, grouped by kind, among what `user` may view."""
    words = query.split()[:8]
    groups: list[HitGroup] = []
    if not words:
        return groups
    people_model = get_user_model()
    kinds: list[tuple[str, str, type[Model], QuerySet[Any], list[str], Any]] = [
        (
            "servers",
            "Servers",
            McpServer,
            McpServer.objects.order_by("name"),
            ["name", "slug", "description"],
            lambda s: (s.name, f"{s.slug} · {s.get_review_status_display()}"),
        ),
        (
            "tools",
            "Tools",
            Tool,
            Tool.objects.select_related("server").order_by("server__name", "name"),
            ["name", "title", "server__slug", "server__name"],
            lambda t: (f"{t.server.name} / {t.name}", t.title or ""),
        ),
        (
            "teams",
            "Teams",
            Team,
            Team.objects.order_by("name"),
            ["name", "slug", "description"],
            lambda t: (t.name, t.slug),
        ),
        (
            "people",
            "People",
            people_model,
            people_model.objects.order_by("username"),
            ["username", "email", "first_name", "last_name"],
            lambda p: (p.username, " ".join(x for x in (p.get_full_name(), p.email) if x)),
        ),
    ]
    for key, title, model, rows, fields, describe in kinds:
        opts = model._meta
        if not user.has_perm(f"{opts.app_label}.view_{opts.model_name}"):
            continue
        found = list(_matching(rows, words, fields)[: RESULTS_PER_KIND + 1])
        group = HitGroup(key, title, more=len(found) > RESULTS_PER_KIND)
        group.list_url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        for obj in found[:RESULTS_PER_KIND]:
            label, detail = describe(obj)
            group.hits.append(Hit(label, detail, _change_url(obj)))
        groups.append(group)
    return groups


def admin_search_view(request: HttpRequest) -> HttpResponse:
    """GET /admin/search/?q=...: staff only (wrapped in the admin site's own check)."""
    query = request.GET.get("q", "").strip()[:200]
    groups = admin_search(user=request.user, query=query)
    return TemplateResponse(
        request,
        "admin/search.html",
        {
            **admin.site.each_context(request),
            "title": f"Search: {query}" if query else "Search",
            "query": query,
            "groups": groups,
            "found": sum(len(group.hits) for group in groups),
        },
    )
