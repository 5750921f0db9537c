"""The authorization server in the admin: registered clients (removable), everyone's connected apps
(revocable) and the client registration policy. The toolkit's own token and code pages are left
out: tokens are revoked through the authorizations they belong to."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse

from registry.core.service_admin import ServiceAdmin
from registry.oauth import services
from registry.oauth.models import (
    AccessToken,
    AuthorizationServerPolicy,
    Client,
    ClientAuthorization,
    Grant,
    IDToken,
    RefreshToken,
)
from registry.oauth.policy import registration_policy

for _model in (Client, AccessToken, Grant, IDToken, RefreshToken):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)


@admin.register(Client)
class ClientAdmin(ServiceAdmin[Client]):
    list_display = ["display_name", "client_id", "registration_source", "verified", "created"]
    list_filter = ["registration_source"]
    search_fields = ["name", "client_id", "redirect_uris"]
    fields = ["name", "client_id", "registration_source", "redirect_uris", "client_type", "created"]
    readonly_fields = ["name", "client_id", "registration_source", "redirect_uris", "client_type"]
    readonly_fields += ["created"]
    actions = ["remove_clients"]

    @admin.display(boolean=True, description="metadata verified")
    def verified(self, obj: Client) -> bool:
        return obj.metadata_verified

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # clients register themselves (DCR) or are known by their metadata URL

    def has_change_permission(self, request: HttpRequest, obj: Client | None = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # removal goes through the service (audited)
        return actions

    def delete_model(self, request: HttpRequest, obj: Client) -> None:
        self.run_service(request, lambda: services.client_delete(actor=request.user, client=obj))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Client]) -> None:
        self.run_each(
            request,
            list(queryset),
            lambda client: services.client_delete(actor=request.user, client=client),
        )

    @admin.action(description="Remove the selected clients (their apps' access is revoked)")
    def remove_clients(self, request: HttpRequest, queryset: QuerySet[Client]) -> None:
        done = self.run_each(
            request,
            list(queryset),
            lambda client: services.client_delete(actor=request.user, client=client),
        )
        messages.success(request, f"Removed {done} client(s).")


@admin.register(ClientAuthorization)
class ClientAuthorizationAdmin(ServiceAdmin[ClientAuthorization]):
    list_display = ["person", "client", "team", "role", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["team", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["person__username", "client__name", "client__client_id", "team__slug"]
    list_select_related = ["person", "client", "team", "role"]
    readonly_fields = [
        "person",
        "client",
        "team",
        "role",
        "created_at",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    ]
    fields = [
        "person",
        "client",
        "team",
        "role",
        "created_at",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    ]
    actions = ["revoke_authorizations"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Revoke the selected apps' access (their tokens stop at once)")
    def revoke_authorizations(
        self, request: HttpRequest, queryset: QuerySet[ClientAuthorization]
    ) -> None:
        done = self.run_each(
            request,
            list(queryset.filter(revoked_at__isnull=True)),
            lambda authorization: services.client_authorization_revoke(
                actor=request.user, authorization=authorization, reason="revoked by an admin"
            ),
        )
        messages.success(request, f"Revoked {done} app(s)' access.")


@admin.register(AuthorizationServerPolicy)
class AuthorizationServerPolicyAdmin(ServiceAdmin[AuthorizationServerPolicy]):
    fields = ["client_id_metadata_documents", "dynamic_client_registration", "updated_at"]
    readonly_fields = ["updated_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        policy = registration_policy()  # one row: the list is its page
        return HttpResponseRedirect(
            reverse("admin:oauth_authorizationserverpolicy_change", args=[policy.pk])
        )

    def save_model(
        self, request: HttpRequest, obj: AuthorizationServerPolicy, form: Any, change: bool
    ) -> None:
        self.run_service(
            request,
            lambda: services.registration_policy_update(
                actor=request.user,
                metadata_documents=obj.client_id_metadata_documents,
                dynamic_registration=obj.dynamic_client_registration,
            ),
        )
