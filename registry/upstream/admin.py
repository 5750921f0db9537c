"""Admin: each per-person server's upstream client (the admin may enter a client id and secret),
and who linked which account (never a token); an admin can remove a person's link. The server
page gets a "Discovery account" line: whose account discovers the server's tools, or that it
needs one and where to link it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from registry.servers.admin.servers import McpServerAdmin
from registry.servers.models import McpServer, UpstreamAuth
from registry.upstream.models import AccountState, UpstreamAccount, UpstreamClient
from registry.upstream.services import account_unlink


class UpstreamClientForm(forms.ModelForm[UpstreamClient]):
    new_client_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput,
        help_text="Set or replace the client secret (never shown again); empty keeps it.",
    )

    class Meta:
        model = UpstreamClient
        fields = ["server", "registration", "client_id", "scopes"]


@admin.register(UpstreamClient)
class UpstreamClientAdmin(admin.ModelAdmin[UpstreamClient]):
    form = UpstreamClientForm
    list_display = ["server", "issuer", "registration", "client_id", "discovered_at"]
    readonly_fields = [
        "resource",
        "issuer",
        "authorization_endpoint",
        "token_endpoint",
        "registration_endpoint",
        "redirect_uri",
        "discovered_at",
    ]

    def save_model(
        self, request: HttpRequest, obj: UpstreamClient, form: Any, change: bool
    ) -> None:
        secret = form.cleaned_data.get("new_client_secret")
        if secret:
            obj.client_secret = {"client_secret": secret}
        super().save_model(request, obj, form, change)


@admin.register(UpstreamAccount)
class UpstreamAccountAdmin(admin.ModelAdmin[UpstreamAccount]):
    list_display = ["person", "server", "state", "subject", "linked_at", "expires_at", "refreshes"]
    list_filter = ["state", "server"]
    search_fields = ["person__username", "server__slug", "subject"]
    fields = (
        "person",
        "server",
        "state",
        "subject",
        "scopes",
        "problem",
        "linked_at",
        "expires_at",
        "refreshed_at",
        "refreshes",
    )
    readonly_fields = fields
    actions = ["unlink"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Unlink the selected accounts (the people must link again)")
    def unlink(self, request: HttpRequest, queryset: QuerySet[UpstreamAccount]) -> None:
        for account in queryset.select_related("server", "person"):
            account_unlink(actor=request.user, account=account, reason="removed by an admin")
        self.message_user(request, "Unlinked.")


def discovery_account_line(server: McpServer) -> SafeString:
    """The server page's line: whose account discovers a per-person server's tools, or that it
    needs one, with the link that starts linking it (the portal's page, whose button posts)."""
    if server.pk is None or server.upstream_auth != UpstreamAuth.PERSON_OAUTH:
        return format_html("{}", "- (the server's own credentials, if any)")
    link = reverse("portal:upstream-link", args=[server.slug]) + "?discovery=1"
    account = (
        UpstreamAccount.objects.filter(server=server, for_discovery=True)
        .select_related("person")
        .first()
    )
    if account is None:
        return format_html(
            "<span class='errornote' id='server-needs-account'>This server needs an admin's "
            "account to discover tools: it signs each person in with their own account, and "
            "Toolroom has none of its own there.</span> <a href='{}' id='link-discovery-account'>"
            "Link my account for discovery</a>, or run <code>manage.py mcp link {} --user "
            "YOUR_NAME</code> and open the URL it prints.",
            link,
            server.slug,
        )
    broken = account.state == AccountState.BROKEN
    return format_html(
        "Tools are discovered and health checked with the account of <strong>{}</strong>{}, "
        "linked {}{}. <a href='{}' id='link-discovery-account'>Re-link my account for "
        "discovery</a>",
        account.person.get_username(),
        f" (the upstream's {account.subject})" if account.subject else "",
        account.linked_at.strftime("%Y-%m-%d %H:%M"),
        f": broken, re-link it ({account.problem})" if broken else "",
        link,
    )


McpServerAdmin.contribute_line(
    fieldset="Launch",
    name="discovery_account",
    description="Discovery account",
    line=discovery_account_line,
)
