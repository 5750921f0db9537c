"""Storage kept for sandboxed servers: the Docker volumes and the seeds uploaded for them."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from registry.servers.models.servers import McpServer
from registry.servers.storage import StorageScope


class StorageVolume(models.Model):
    """One Docker volume the workers made for a server's storage (docs/sandbox.md, "Storage"):
    whose it is, its limit, what it holds as the engine last measured."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="volumes")
    name = models.CharField(max_length=200, unique=True, help_text="The engine's volume name.")
    path = models.CharField(max_length=200)
    scope = models.CharField(max_length=20, choices=StorageScope.choices)
    owner_key = models.CharField(
        max_length=100, help_text="server, team:<id> or conversation:<hash>."
    )
    owner_label = models.CharField(max_length=200, blank=True, help_text="e.g. team alpha")
    size_limit_mb = models.PositiveIntegerField()
    used_bytes = models.BigIntegerField(null=True, blank=True)
    measured_at = models.DateTimeField(null=True, blank=True)
    over_limit = models.BooleanField(
        default=False, help_text="Over its size when last measured: mounted read-only since."
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(default=timezone.now)
    delete_requested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["server", "path", "owner_key"]

    def __str__(self) -> str:
        return f"{self.path} ({self.owner_label or self.owner_key})"


class StorageSeed(models.Model):
    """An archive an admin uploaded to pre-fill a storage path's new volumes (normalised to a tar
    of plain files and folders, owned by the sandbox's user)."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="storage_seeds")
    path = models.CharField(max_length=200)
    filename = models.CharField(max_length=200)
    archive = models.BinaryField(help_text="gzip-compressed tar, members relative to the path.")
    sha256 = models.CharField(max_length=64)
    files = models.PositiveIntegerField()
    size_bytes = models.BigIntegerField(help_text="Unpacked size.")
    uploaded_by = models.CharField(max_length=200)
    uploaded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["server", "path"], name="storage_seed_one_per_path")
        ]

    def __str__(self) -> str:
        return f"{self.filename} for {self.path}"
