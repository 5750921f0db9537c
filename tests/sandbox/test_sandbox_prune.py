"""`manage.py sandbox prune`: exactly the server images no server uses go, with the bytes freed;
base images and each server's recent images stay. Real engine, images built here (tiny, under a
repository of this test's own, so nothing anyone else built is ever a candidate)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import uuid
from datetime import timedelta

import docker
import pytest
from django.core.management import call_command

from registry.audit.services import audit_record
from registry.servers.models import ServerStatus
from tests.factories import McpServerFactory
from workers.adapters.sandbox import BASE_IMAGE, build_base_image
from workers.sandbox_pruning import sandbox_images_prune

pytestmark = [pytest.mark.django_db, pytest.mark.containers]

MEGABYTE = 1024 * 1024


@pytest.fixture
def repository(engine):
    """A repository of this test's own; whatever is left in it is removed afterwards."""
    name = f"toolroom/prune-test-{uuid.uuid4().hex[:10]}"
    yield name
    for image in engine.images.list(name=name):
        for tag in image.tags:
            engine.images.remove(tag, force=True)


def _build(engine, repository, tag, *, package=""):
    """A server image (labelled as images/ labels them) with 1 MB of its own."""
    base = build_base_image(engine=engine)
    inputs = {"kind": "npm", "package": package} if package else {"kind": "test", "tag": tag}
    dockerfile = f"FROM {base.digest}\nCOPY blob /blob\n".encode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("blob", os.urandom(MEGABYTE))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive.seek(0)
    image, _ = engine.images.build(
        fileobj=archive,
        custom_context=True,
        tag=f"{repository}:{tag}",
        rm=True,
        network_mode="none",
        labels={
            "io.toolroom.managed": "true",
            "io.toolroom.role": "server-image",
            "io.toolroom.image-inputs": json.dumps(inputs),
        },
    )
    return f"{repository}:{tag}", image.id


def _ran(server, reference, digest):
    """What the worker records when a server runs from a new image."""
    ServerStatus.objects.update_or_create(
        server=server, defaults={"sandbox_image": reference, "sandbox_image_digest": digest}
    )
    audit_record(
        actor="worker:sandbox",
        action="server.sandbox_image_changed",
        target=server,
        server=server,
        summary="test",
        after={"image": reference, "digest": digest},
    )


def _tags(engine, repository):
    return sorted(tag for image in engine.images.list(name=repository) for tag in image.tags)


def test_prune_removes_exactly_the_images_no_server_uses(engine, repository):
    upgraded = McpServerFactory(slug="upgraded")
    packaged = McpServerFactory(
        slug="packaged",
        package_registry="npm",
        package_identifier="@scope/server",
        package_version="2.0.0",
    )
    old, old_id = _build(engine, repository, "v1")
    middle, middle_id = _build(engine, repository, "v2")
    current, current_id = _build(engine, repository, "v3")
    built_not_run, _ = _build(engine, repository, "pkg", package="@scope/server@2.0.0")
    orphan, _ = _build(engine, repository, "orphan")
    for reference, image_id in ((old, old_id), (middle, middle_id), (current, current_id)):
        _ran(upgraded, reference, image_id)
    assert packaged.package_version == "2.0.0"

    report = sandbox_images_prune(
        keep_per_server=2, min_age=timedelta(0), repository_prefix=repository
    )

    assert sorted(image.reference for image in report.removed) == sorted([old, orphan])
    assert _tags(engine, repository) == sorted([middle, current, built_not_run])
    # Each removed image had 1 MB nobody else shares.
    assert 2 * MEGABYTE <= report.bytes_freed < 3 * MEGABYTE
    assert report.kept[current] == "a server runs it"
    assert report.kept[built_not_run] == "a server is registered with npm:@scope/server@2.0.0"
    assert engine.images.get(BASE_IMAGE)  # never a candidate


def test_young_images_stay_and_the_command_reports_the_bytes(engine, repository):
    young, _ = _build(engine, repository, "young")
    out = io.StringIO()

    call_command("sandbox", "prune", "--dry-run", stdout=out)
    assert f"kept {young}: younger than 1 day, 0:00:00" in out.getvalue()

    report = sandbox_images_prune(min_age=timedelta(0), repository_prefix=repository, dry_run=True)
    assert [image.reference for image in report.removed] == [young]
    assert _tags(engine, repository) == [young]  # a dry run removes nothing

    sandbox_images_prune(min_age=timedelta(0), repository_prefix=repository)
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(young)
