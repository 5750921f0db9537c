"""The server page's review of its resources and prompts: approve, hide or show again the ticked
ones (docs/admin.md, "Deciding")."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse

from registry.servers import services
from registry.servers.models import McpServer


def review_items(
    model_admin: admin.ModelAdmin[McpServer], request: HttpRequest, object_id: int
) -> HttpResponse:
    """Approve, hide or show again the resources and prompts ticked on the server page; each
    is approved at the definition the page showed (its hash), as tools are."""
    if request.method != "POST" or not request.user.has_perm("servers.approve_tool"):
        raise PermissionDenied
    server = get_object_or_404(McpServer, pk=object_id)
    back = reverse("admin:servers_mcpserver_change", args=[server.pk]) + "#server-items"
    action = request.POST.get("action", "")
    if action not in services.ITEM_ACTIONS:
        raise PermissionDenied
    items: list[Any] = []
    for kind, model in services.ITEM_MODELS.items():
        ids = [
            int(value.partition(":")[2])
            for value in request.POST.getlist("item")
            if value.startswith(f"{kind}:") and value.partition(":")[2].isdigit()
        ]
        items.extend(model.objects.filter(server=server, pk__in=ids).select_related("server"))
    if not items:
        model_admin.message_user(request, "Tick the resources or prompts first.", messages.WARNING)
        return HttpResponseRedirect(back)
    result = services.items_review_bulk(
        actor=request.user,
        items=items,
        action=action,
        note=request.POST.get("note", ""),
        # The definitions the page showed; none shown is never "the current one".
        expected_hashes={
            key.removeprefix("hash_"): str(request.POST.get(key, ""))
            for key in request.POST
            if key.startswith("hash_")
        },
    )
    for item, why in result.skipped:
        model_admin.message_user(request, f"{item}: {why}", messages.WARNING)
    if result.done:
        done = {"approve": "Approved", "hide": "Hid", "unhide": "Showed again"}[action]
        model_admin.message_user(request, f"{done} {len(result.done)} item(s).", messages.SUCCESS)
    return HttpResponseRedirect(back)
