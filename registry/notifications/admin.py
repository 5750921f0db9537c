"""Webhook endpoints, their deliveries and the access request e-mails in the admin. Endpoints
are added through `webhook_endpoint_create` (network guard, generated secret shown once, audit);
deliveries and e-mails are the outbox, read-only (the workers write them): each list shows the
backlog (waiting, due now, the oldest, failed in 24 h), and failed ones can be made due again."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse

from registry.core.errors import ApplicationError
from registry.core.service_admin import ServiceAdmin
from registry.notifications import services
from registry.notifications.models import EmailNotification, WebhookDelivery, WebhookEndpoint


class WebhookEndpointForm(forms.ModelForm[WebhookEndpoint]):
    url = forms.URLField(max_length=500, assume_scheme="https", label="URL")

    class Meta:
        model = WebhookEndpoint
        fields = ["team", "url", "description"]

    def clean_url(self) -> str:
        try:
            return services._check_url(self.cleaned_data["url"])
        except ApplicationError as exc:
            raise forms.ValidationError(exc.message) from exc


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ServiceAdmin[WebhookEndpoint]):
    form = WebhookEndpointForm
    list_display = ["url", "team", "is_active", "description", "created_by_label", "created_at"]
    list_filter = ["is_active", "team"]
    list_select_related = ["team"]
    actions = ["deactivate_selected"]

    def has_change_permission(
        self, request: HttpRequest, obj: WebhookEndpoint | None = None
    ) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(
        self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool
    ) -> None:
        created = services.webhook_endpoint_create(
            actor=request.user, url=obj.url, team=obj.team, description=obj.description
        )
        obj.pk = created.endpoint.pk
        self.hand_over(request, "secret", created.secret)

    def response_add(
        self, request: HttpRequest, obj: WebhookEndpoint, post_url_continue: Any = None
    ) -> HttpResponse:
        secret = self.handed_over(request, "secret")
        if secret is None:
            return HttpResponseRedirect(request.path)
        # Shown on this page only: never in a message (cookie or session) or a log.
        return TemplateResponse(
            request,
            "admin/notifications/webhookendpoint/created.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": "Webhook added",
                "endpoint": WebhookEndpoint.objects.select_related("team").get(pk=obj.pk),
                "secret": secret,
            },
        )

    @admin.action(description="Turn off the selected webhooks", permissions=["change"])
    def deactivate_selected(
        self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]
    ) -> None:
        for endpoint in queryset:
            services.webhook_endpoint_deactivate(actor=request.user, endpoint=endpoint)
        messages.success(request, f"Turned off {queryset.count()} webhook(s).")


class OutboxAdmin(admin.ModelAdmin[Any]):
    """Read-only outbox rows, with the backlog above the list and a retry for failed ones."""

    change_list_template = "admin/notifications/outbox_change_list.html"
    actions = ["retry_selected"]
    kind = ""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        backlog = services.notifications_backlog()[self.kind]
        return super().changelist_view(request, {**(extra_context or {}), "backlog": backlog})

    @admin.action(description="Deliver the selected failed ones again", permissions=["view"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        if not request.user.is_superuser:
            messages.error(request, "Only a superuser may send notifications again.")
            return
        count = services.notifications_retry(actor=request.user, entries=list(queryset))
        messages.success(request, f"{count} failed notification(s) are due again.")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(OutboxAdmin):
    kind = "webhook"
    list_display = [
        "event",
        "endpoint",
        "state",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "created_at",
    ]
    list_filter = ["state", "event"]
    list_select_related = ["endpoint"]
    readonly_fields = [f.name for f in WebhookDelivery._meta.get_fields() if f.concrete]


@admin.register(EmailNotification)
class EmailNotificationAdmin(OutboxAdmin):
    kind = "email"
    list_display = ["event", "access_request", "state", "attempts", "next_attempt_at", "created_at"]
    list_filter = ["state", "event"]
    list_select_related = ["access_request"]
    readonly_fields = [f.name for f in EmailNotification._meta.get_fields() if f.concrete]
