"""A server's tools, every definition seen, approvals pinned to one; resources and prompts, each
approved (or hidden) at one definition."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from registry.core.canonical import definition_hash
from registry.servers.models.servers import McpServer


class PermissionClass(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write"
    CONNECT = "connect", "Connect"


class ApprovalState(models.TextChoices):
    UNAPPROVED = "unapproved", "Awaiting approval"
    APPROVED = "approved", "Approved"
    CHANGED = "changed", "Changed since approval"
    REVOKED = "revoked", "Revoked"


class Tool(models.Model):
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=200)
    title = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)
    output_schema = models.JSONField(null=True, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    definition = models.JSONField(help_text="The whole definition as the server sent it.")
    definition_hash = models.CharField(max_length=64, db_index=True)

    permission_class_derived = models.CharField(
        max_length=10, choices=PermissionClass.choices, default=PermissionClass.WRITE
    )
    permission_class_override = models.CharField(
        max_length=10, choices=PermissionClass.choices, blank=True
    )
    permission_class = models.CharField(
        max_length=10,
        choices=PermissionClass.choices,
        default=PermissionClass.WRITE,
        editable=False,
        help_text="The override where an admin set one, else what the annotations imply.",
    )

    approval_state = models.CharField(
        max_length=20, choices=ApprovalState.choices, default=ApprovalState.UNAPPROVED
    )
    # The hash the active approval pins; the tool is callable only while it equals
    # `definition_hash`, so a changed definition is unapproved even before anything else runs.
    approved_definition_hash = models.CharField(max_length=64, blank=True)
    findings = models.JSONField(default=list, blank=True)

    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["server__name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["server", "name"],
                name="tool_unique_name_per_server",
                violation_error_message="This server already has a tool with this name.",
            )
        ]
        indexes = [models.Index(fields=["server", "approval_state"], name="tool_server_state_idx")]
        permissions = [("approve_tool", "Can approve and revoke tool definitions")]

    def __str__(self) -> str:
        return f"{self.server.slug}/{self.name}" if self.server_id else self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.permission_class = self.permission_class_override or self.permission_class_derived
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and (
            "permission_class_override" in update_fields
            or "permission_class_derived" in update_fields
        ):
            kwargs["update_fields"] = {*update_fields, "permission_class"}
        super().save(*args, **kwargs)

    @property
    def is_approved(self) -> bool:
        return (
            self.approval_state == ApprovalState.APPROVED
            and self.approved_definition_hash == self.definition_hash
            and self.removed_at is None
        )

    @property
    def display_title(self) -> str:
        return self.title or str(self.annotations.get("title") or "") or self.name


class ToolRevision(models.Model):
    """Every distinct definition a tool has had, so an admin can diff approved vs current."""

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="revisions")
    definition_hash = models.CharField(max_length=64)
    definition = models.JSONField()
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-first_seen_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tool", "definition_hash"], name="tool_revision_unique_hash"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool_id}@{self.definition_hash[:12]}"


class ApprovalEndReason(models.TextChoices):
    REVOKED = "revoked", "Revoked by an admin"
    DEFINITION_CHANGED = "definition_changed", "The server changed the definition"
    REMOVED = "removed", "The server no longer offers the tool"


class ToolApproval(models.Model):
    """An admin's approval of one exact definition (by hash). At most one is active per tool."""

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="approvals")
    definition_hash = models.CharField(max_length=64)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    approver_label = models.CharField(max_length=200)
    approved_at = models.DateTimeField(default=timezone.now)
    note = models.TextField(blank=True)
    acknowledged_findings = models.JSONField(
        default=list, blank=True, help_text="The scanner findings the admin saw when approving."
    )
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by_label = models.CharField(max_length=200, blank=True)
    end_reason = models.CharField(max_length=30, choices=ApprovalEndReason.choices, blank=True)
    end_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-approved_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tool"],
                condition=Q(ended_at__isnull=True),
                name="tool_approval_one_active",
                violation_error_message="This tool already has an active approval.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool_id}@{self.definition_hash[:12]} by {self.approver_label}"


class ItemReview(models.TextChoices):
    """The review state of a server's resource or prompt (docs/access.md, "Resources and prompts
    are approved one by one")."""

    PENDING = "pending", "Awaiting approval"
    APPROVED = "approved", "Approved"
    HIDDEN = "hidden", "Hidden"


class ReviewedItem(models.Model):
    """What a resource and a prompt share: the hash of what clients see of it, and an admin's
    approval pinned to one hash (or the admin hid it). Offered through the gateway only while
    approved at its current definition; a changed definition drops the approval."""

    definition_hash = models.CharField(max_length=64, blank=True)
    review_state = models.CharField(
        max_length=10, choices=ItemReview.choices, default=ItemReview.PENDING
    )
    # The hash the approval pins; kept when the definition changes, so the page can say so.
    approved_definition_hash = models.CharField(max_length=64, blank=True)
    reviewed_by_label = models.CharField(max_length=200, blank=True)
    reviewed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    def client_definition(self) -> dict[str, Any]:
        raise NotImplementedError

    def refresh_definition_hash(self) -> str:
        self.definition_hash = definition_hash(self.client_definition())
        return self.definition_hash

    @property
    def is_approved(self) -> bool:
        return (
            self.review_state == ItemReview.APPROVED
            and bool(self.approved_definition_hash)
            and self.approved_definition_hash == self.definition_hash
        )

    @property
    def definition_changed(self) -> bool:
        """Approved once at another definition, and not approved since."""
        return (
            self.review_state == ItemReview.PENDING
            and bool(self.approved_definition_hash)
            and self.approved_definition_hash != self.definition_hash
        )


def resource_definition(
    *, uri: str, is_template: bool, name: str, title: str, description: str, mime_type: str
) -> dict[str, Any]:
    """What clients see of a resource (or a resource template): what its hash covers."""
    return {
        "uriTemplate" if is_template else "uri": uri,
        "name": name,
        "title": title,
        "description": description,
        "mimeType": mime_type,
    }


def prompt_definition(
    *, name: str, title: str, description: str, arguments: list[Any]
) -> dict[str, Any]:
    """What clients see of a prompt: what its hash covers."""
    return {"name": name, "title": title, "description": description, "arguments": arguments}


class ServerResource(ReviewedItem):
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="resources")
    uri = models.CharField(max_length=1000)
    name = models.CharField(max_length=300, blank=True)
    title = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    mime_type = models.CharField(max_length=200, blank=True)
    is_template = models.BooleanField(default=False)

    class Meta:
        ordering = ["uri"]
        constraints = [
            models.UniqueConstraint(fields=["server", "uri"], name="resource_unique_uri")
        ]

    def __str__(self) -> str:
        return self.name or self.uri

    def client_definition(self) -> dict[str, Any]:
        return resource_definition(
            uri=self.uri,
            is_template=self.is_template,
            name=self.name,
            title=self.title,
            description=self.description,
            mime_type=self.mime_type,
        )


class ServerPrompt(ReviewedItem):
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="prompts")
    name = models.CharField(max_length=300)
    title = models.CharField(max_length=300, blank=True)
    description = models.TextField(blank=True)
    arguments = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="prompt_unique_name")
        ]

    def __str__(self) -> str:
        return self.name

    def client_definition(self) -> dict[str, Any]:
        return prompt_definition(
            name=self.name,
            title=self.title,
            description=self.description,
            arguments=list(self.arguments or []),
        )
