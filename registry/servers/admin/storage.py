"""The server page's storage: the volumes the workers made (what each holds, against its limit),
deleting one (audited), and pre-filling new volumes from an uploaded archive."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse

from registry.core.errors import ApplicationError
from registry.servers.models import McpServer, StorageSeed, StorageVolume
from registry.servers.services.storage import (
    MIB,
    SEED_MAX_UPLOAD_BYTES,
    storage_seed_set,
    storage_volume_delete,
)

CHANGE_PERMISSION = "servers.change_mcpserver"


def storage_page_context(request: HttpRequest, server: McpServer) -> dict[str, Any]:
    volumes = []
    for volume in StorageVolume.objects.filter(server=server).order_by("path", "owner_key"):
        used = volume.used_bytes
        volumes.append(
            {
                "volume": volume,
                "used": "not measured yet" if used is None else f"{used / MIB:.1f} MB",
                "percent": None
                if used is None
                else round(100 * used / (volume.size_limit_mb * MIB)),
            }
        )
    seeds = (
        {seed.path: seed for seed in StorageSeed.objects.filter(server=server).defer("archive")}
        if server.storage
        else {}
    )
    return {
        "storage_entries": [
            {**entry, "seed": seeds.get(str(entry.get("path")))} for entry in server.storage or []
        ],
        "storage_volumes": volumes,
        "can_change_storage": request.user.has_perm(CHANGE_PERMISSION),
        "storage_seed_max_mb": SEED_MAX_UPLOAD_BYTES // MIB,
    }


def _back(server_id: int) -> HttpResponseRedirect:
    return HttpResponseRedirect(
        reverse("admin:servers_mcpserver_change", args=[server_id]) + "#server-storage"
    )


def storage_volume_delete_view(
    request: HttpRequest, object_id: int, volume_id: int
) -> HttpResponse:
    """Delete one volume (POST, with a reason): audited, removed by a worker."""
    if request.method != "POST" or not request.user.has_perm(CHANGE_PERMISSION):
        raise PermissionDenied
    volume = get_object_or_404(StorageVolume, pk=volume_id, server_id=object_id)
    try:
        storage_volume_delete(
            actor=request.user, volume=volume, reason=request.POST.get("reason", "")
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            f"The volume {volume} is deleted; a worker removes it from the engine once no "
            "session uses it.",
        )
    return _back(object_id)


def storage_seed_view(request: HttpRequest, object_id: int) -> HttpResponse:
    """Upload an archive that pre-fills the new volumes of one storage path (POST)."""
    if request.method != "POST" or not request.user.has_perm(CHANGE_PERMISSION):
        raise PermissionDenied
    server = get_object_or_404(McpServer, pk=object_id)
    upload = request.FILES.get("archive")
    if upload is None:
        messages.error(request, "Choose an archive (.tar, .tar.gz, .tgz or .zip) to upload.")
        return _back(server.pk)
    if upload.size is not None and upload.size > SEED_MAX_UPLOAD_BYTES:
        messages.error(request, f"The archive is larger than {SEED_MAX_UPLOAD_BYTES // MIB} MB.")
        return _back(server.pk)
    try:
        seed = storage_seed_set(
            actor=request.user,
            server=server,
            path=request.POST.get("path", ""),
            filename=upload.name or "archive",
            content=upload.read(),
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            f"{seed.filename} ({seed.files} files) pre-fills the new volumes at {seed.path}; "
            "delete a volume to have it made again from it.",
        )
    return _back(server.pk)
