"""The admin page that imports servers from an uploaded file: upload, read the plan, confirm.

Step one checks the file and shows what would change (or every problem); nothing is written.
The confirm step carries the file back in a signed, time-limited field (its content encrypted
with the secrets key, so no secret from the file sits in the page) and checks it again before
applying it, with the permissions the user has at that moment.
"""

from __future__ import annotations

import base64
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from registry.core.secret_fields import decrypt_text, encrypt_text
from registry.servers.importing import (
    FORMAT_LABELS,
    FORMATS,
    ImportAction,
    ImportFileError,
    ImportOptions,
    ImportPlan,
    ImportProblem,
    import_apply,
    import_plan,
    read_limited,
)
from registry.servers.models import Category, McpServer
from registry.servers.policy import TrustTier

SIGNING_SALT = "registry.servers.admin_import"
# How long a checked file may wait for its confirmation.
CONFIRM_MAX_AGE_SECONDS = 60 * 60
TEMPLATE = "admin/servers/import_servers.html"


class ImportUploadForm(forms.Form):
    file = forms.FileField(
        help_text="An mcp.json (Claude Desktop, Claude Code, VS Code, Cursor), an official "
        "registry server.json, or a Toolroom YAML file."
    )
    format = forms.ChoiceField(choices=[(f, FORMAT_LABELS[f]) for f in FORMATS], initial="auto")
    tier = forms.ChoiceField(
        required=False,
        help_text="Vouch for what the file cannot say, e.g. builtin for programs installed on "
        "the host. Applies to every server in the file.",
    )
    category = forms.ModelChoiceField(
        queryset=Category.objects.all(),
        required=False,
        to_field_name="slug",
        empty_label="As the file says",
        help_text="Put every server in this category.",
    )

    def __init__(self, *args: Any, may_vouch: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tier = cast(forms.ChoiceField, self.fields["tier"])
        tiers = TrustTier.choices if may_vouch else [(TrustTier.UNTRUSTED, "Untrusted")]
        tier.choices = [("", "As the file says (untrusted when it says nothing)"), *tiers]
        if not may_vouch:
            tier.help_text = (
                "Giving imported servers a tier above untrusted needs the permission 'Can give "
                "imported servers a trust tier above untrusted'."
            )


def import_servers_view(
    model_admin: admin.ModelAdmin[McpServer], request: HttpRequest
) -> HttpResponse:
    """Upload a file, read what it would change, confirm. Needs `servers.add_mcpserver`
    (and `servers.change_mcpserver` for a file that updates existing servers)."""
    if not request.user.has_perm("servers.add_mcpserver"):
        raise PermissionDenied
    may_vouch = request.user.has_perm("servers.vouch_trust_tier")
    if request.method == "POST" and "token" in request.POST:
        return _confirm(model_admin, request, may_vouch=may_vouch)

    form = ImportUploadForm(request.POST or None, request.FILES or None, may_vouch=may_vouch)
    if request.method != "POST" or not form.is_valid():
        return _render(model_admin, request, form=form)
    upload = form.cleaned_data["file"]
    category = form.cleaned_data["category"]
    options = ImportOptions(
        format=form.cleaned_data["format"],
        tier=form.cleaned_data["tier"] or None,
        category=category.slug if category is not None else None,
        may_vouch_tier=may_vouch,
        dry_run=True,
    )
    try:
        content = read_limited(upload, size=upload.size)
        plan = import_plan(content=content, filename=upload.name, options=options)
        _check_change_permission(request, plan)
    except ImportFileError as exc:
        return _render(model_admin, request, form=form, problems=exc.problems)
    token = signing.dumps(
        {
            "user": request.user.pk,
            "filename": upload.name,
            "format": options.format,
            "tier": options.tier,
            "category": options.category,
            "content": encrypt_text(base64.b64encode(content).decode("ascii")),
        },
        salt=SIGNING_SALT,
        compress=True,
    )
    return _render(model_admin, request, form=None, plan=plan, token=token)


def _confirm(
    model_admin: admin.ModelAdmin[McpServer], request: HttpRequest, *, may_vouch: bool
) -> HttpResponse:
    try:
        payload = signing.loads(
            request.POST["token"], salt=SIGNING_SALT, max_age=CONFIRM_MAX_AGE_SECONDS
        )
    except signing.SignatureExpired:
        messages.error(request, "The checked file waited too long; upload it again.")
        return HttpResponseRedirect(request.path)
    except signing.BadSignature:
        messages.error(request, "The import could not be confirmed; upload the file again.")
        return HttpResponseRedirect(request.path)
    if payload.get("user") != request.user.pk:
        messages.error(request, "The import could not be confirmed; upload the file again.")
        return HttpResponseRedirect(request.path)
    content = base64.b64decode(decrypt_text(payload["content"]))
    options = ImportOptions(
        format=payload["format"],
        tier=payload["tier"],
        category=payload["category"],
        may_vouch_tier=may_vouch,
    )
    try:
        # Checked again: the registry, or the user's permissions, may have changed since.
        plan = import_plan(content=content, filename=payload["filename"], options=options)
        _check_change_permission(request, plan)
        if plan.updated_slugs and request.POST.get("confirm_updates") != "yes":
            # An entry named like an existing server changes that server: said in the plan,
            # and done only once the admin ticks the box that names them.
            messages.error(
                request,
                "Nothing was imported: tick the box to confirm updating the existing "
                "server(s) the plan names.",
            )
            return _render(model_admin, request, form=None, plan=plan, token=request.POST["token"])
        result = import_apply(plan=plan, actor=request.user)
    except ImportFileError as exc:
        form = ImportUploadForm(may_vouch=may_vouch)
        return _render(model_admin, request, form=form, problems=exc.problems)
    messages.success(request, result.summary())
    opts = model_admin.model._meta
    return HttpResponseRedirect(
        reverse(
            f"admin:{opts.app_label}_{opts.model_name}_changelist",
            current_app=model_admin.admin_site.name,
        )
    )


def _check_change_permission(request: HttpRequest, plan: ImportPlan) -> None:
    updates = plan.entries_with(ImportAction.UPDATE)
    if updates and not request.user.has_perm("servers.change_mcpserver"):
        raise ImportFileError(
            [
                ImportProblem(
                    entry.label,
                    None,
                    "This server exists and the file changes it; "
                    "you may add servers but not change them.",
                )
                for entry in updates
            ]
        )


def _render(
    model_admin: admin.ModelAdmin[McpServer],
    request: HttpRequest,
    *,
    form: ImportUploadForm | None,
    plan: ImportPlan | None = None,
    token: str = "",
    problems: list[ImportProblem] | None = None,
) -> HttpResponse:
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Import MCP servers",
        "opts": opts,
        "app_label": opts.app_label,
        "form": form,
        "plan": plan,
        "token": token,
        "problems": problems or [],
        "has_view_permission": model_admin.has_view_permission(request),
    }
    return TemplateResponse(request, TEMPLATE, context, status=400 if problems else 200)
