"""Issue 11, item 2: an import's `${VAR}` reads only operator-allowed variables, never Toolroom's
own secrets: through the planning service, the admin import page (a dry run) and the command."""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from registry.servers.importing import ImportFileError, ImportOptions, import_plan
from registry.servers.models import McpServer

pytestmark = pytest.mark.django_db


def _yaml(value: str) -> bytes:
    return (
        "version: 1\nmcp_servers:\n  s:\n    name: S\n    transport: stdio\n"
        f'    command: ["python"]\n    description: "{value}"\n'
    ).encode()


def _problems(content: bytes) -> list[str]:
    with pytest.raises(ImportFileError) as caught:
        import_plan(content=content, filename="s.yaml", options=ImportOptions(dry_run=True))
    return [problem.message for problem in caught.value.problems]


@pytest.mark.parametrize("name", ["SECRET_KEY", "TOOLROOM_SECRETS_KEY", "DATABASE_URL"])
def test_it_never_expands_toolrooms_own_secrets(monkeypatch, settings, name):
    monkeypatch.setenv(name, "very-secret-value")
    settings.TOOLROOM_IMPORT_ALLOWED_VARIABLES = [name]  # not even when an operator lists them

    messages = _problems(_yaml(f"${{{name}}}"))

    assert any(f"${{{name}}}" in m and "Toolroom's own secrets" in m for m in messages)
    assert not any("very-secret-value" in m for m in messages)


def test_it_refuses_a_variable_the_operator_did_not_allow(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")

    messages = _problems(_yaml("${AWS_SECRET_ACCESS_KEY}"))

    assert any(
        "${AWS_SECRET_ACCESS_KEY}" in m
        and "TOOLROOM_IMPORT_AWS_SECRET_ACCESS_KEY" in m
        and "TOOLROOM_IMPORT_ALLOWED_VARIABLES" in m
        for m in messages
    ), messages


def test_it_refuses_a_variable_holding_toolrooms_secret_key_under_another_name(
    monkeypatch, settings
):
    monkeypatch.setenv("TOOLROOM_IMPORT_COPY", settings.SECRET_KEY)

    messages = _problems(_yaml("${TOOLROOM_IMPORT_COPY}"))

    assert any("Toolroom's own secrets" in m for m in messages)


def test_it_expands_prefixed_and_listed_variables(monkeypatch, settings):
    monkeypatch.setenv("TOOLROOM_IMPORT_REGION", "eu")
    monkeypatch.setenv("REPO_DIR", "/srv/repo")
    settings.TOOLROOM_IMPORT_ALLOWED_VARIABLES = ["REPO_DIR"]

    plan = import_plan(
        content=_yaml("${TOOLROOM_IMPORT_REGION} ${REPO_DIR}"),
        filename="s.yaml",
        options=ImportOptions(dry_run=True),
    )

    assert plan.entries[0].values["description"] == "eu /srv/repo"


def test_the_admin_import_preview_does_not_show_the_secret_key(client, alice, settings):
    client.force_login(alice)

    response = client.post(
        reverse("admin:servers_mcpserver_import"),
        {
            "file": SimpleUploadedFile("s.yaml", _yaml("${SECRET_KEY}")),
            "format": "auto",
            "tier": "",
            "category": "",
        },
    )

    body = response.content.decode()
    assert settings.SECRET_KEY not in body
    assert "Toolroom&#x27;s own secrets" in body or "Toolroom's own secrets" in body
    assert not McpServer.objects.exists()


def test_the_import_command_refuses_a_variable_the_operator_did_not_allow(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME_TOKEN", "t")
    path = tmp_path / "s.yaml"
    path.write_bytes(_yaml("${HOME_TOKEN}"))

    stderr = io.StringIO()
    with pytest.raises(CommandError, match="not imported"):
        call_command("import_servers", str(path), stderr=stderr)
    assert "${HOME_TOKEN}, which imports may not read" in stderr.getvalue()
    assert not McpServer.objects.exists()
