"""The portal's Connected accounts page: each person links, re-links and unlinks their own account
at the per-person servers of their teams (docs/authentication.md, "Upstream accounts")."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from registry.core.errors import ApplicationError
from registry.servers.jobs.discovery import discovery_request
from registry.servers.models import McpServer, UpstreamAuth
from registry.upstream.models import UpstreamAccount
from registry.upstream.services import (
    account_unlink,
    link_finish,
    link_start,
    person_upstream_accounts,
    secret_store,
)


@login_required
def upstream_accounts(request: HttpRequest) -> HttpResponse:
    """Every per-person server of the person's teams: linked or not, until when, which scopes."""
    return render(
        request,
        "portal/upstream_accounts.html",
        {"section": "accounts", "rows": person_upstream_accounts(person=request.user)},
    )


@login_required
@require_http_methods(["GET", "POST"])
def upstream_link(request: HttpRequest, slug: str) -> HttpResponse:
    """Start the upstream's sign-in (POST): the browser goes to its authorization endpoint. GET
    (the URL `manage.py mcp link` prints) shows the button that does it, for the person signed
    in; `?discovery=1` (admins) links the account that discovers the server's tools."""
    slugs = {row["server"].slug for row in person_upstream_accounts(person=request.user)}
    server = get_object_or_404(McpServer, slug=slug, upstream_auth=UpstreamAuth.PERSON_OAUTH)
    if server.slug not in slugs and not request.user.is_staff:
        messages.error(request, f"None of your teams uses '{slug}'.")
        return HttpResponseRedirect(reverse("portal:upstream-accounts"))
    asked = request.POST if request.method == "POST" else request.GET
    discovery = asked.get("discovery") == "1" and request.user.is_staff
    if request.method == "GET":
        return render(
            request,
            "portal/upstream_link.html",
            {"section": "accounts", "server": server, "discovery": discovery},
        )
    try:
        url = link_start(
            person=request.user, server=server, session=request.session, for_discovery=discovery
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return HttpResponseRedirect(reverse("portal:upstream-accounts"))
    return HttpResponseRedirect(url)


@login_required
def upstream_callback(request: HttpRequest) -> HttpResponse:
    """Toolroom's one redirect URI at every upstream: the code, for the session that asked."""
    try:
        account = link_finish(
            person=request.user,
            session=request.session,
            state=request.GET.get("state", ""),
            code=request.GET.get("code", ""),
            error=request.GET.get("error_description") or request.GET.get("error", ""),
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        if account.for_discovery and request.user.is_staff:
            # Back to the server's admin page, whose tools this account now discovers.
            discovery_request(
                server=account.server, actor=request.user, trigger="discovery account linked"
            )
            messages.success(
                request,
                f"Your account at {account.server.name} is linked and discovers its tools; "
                "a discovery was requested.",
            )
            return HttpResponseRedirect(
                reverse("admin:servers_mcpserver_change", args=[account.server_id])
            )
        messages.success(request, f"Your account at {account.server.name} is linked.")
    return HttpResponseRedirect(reverse("portal:upstream-accounts"))


@login_required
@require_POST
def upstream_secret(request: HttpRequest, slug: str) -> HttpResponse:
    """Enter (or replace) the person's own token or API key for a person_secret server."""
    slugs = {row["server"].slug for row in person_upstream_accounts(person=request.user)}
    server = get_object_or_404(McpServer, slug=slug, upstream_auth=UpstreamAuth.PERSON_SECRET)
    if server.slug not in slugs:
        messages.error(request, f"None of your teams uses '{slug}'.")
        return HttpResponseRedirect(reverse("portal:upstream-accounts"))
    try:
        secret_store(person=request.user, server=server, secret=request.POST.get("secret", ""))
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Your token for {server.name} is kept (it is never shown).")
    return HttpResponseRedirect(reverse("portal:upstream-accounts"))


@login_required
@require_POST
def upstream_unlink(request: HttpRequest, slug: str) -> HttpResponse:
    account = UpstreamAccount.objects.filter(person_id=request.user.pk, server__slug=slug).first()
    if account is None:
        messages.error(request, f"You have no linked account at '{slug}'.")
    else:
        account_unlink(actor=request.user, account=account, reason="unlinked by the person")
        messages.success(request, f"Your account at '{slug}' is unlinked.")
    return HttpResponseRedirect(reverse("portal:upstream-accounts"))
