"""The import page warns when the tier option vouches builtin for every entry that would run as a
local process (issue 28)."""

from __future__ import annotations

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from registry.servers.importing import ImportOptions, import_plan
from registry.servers.importing.report import plan_lines

pytestmark = pytest.mark.django_db

URL = "admin:servers_mcpserver_import"
FILE = json.dumps(
    {
        "mcpServers": {
            "notes": {"command": "uvx", "args": ["mcp-server-notes==1.2.0"]},
            "shell-helper": {"command": "npx", "args": ["-y", "shell-helper-mcp@0.3.1"]},
            "hosted": {"type": "http", "url": "https://mcp.example.com/mcp"},
        }
    }
).encode()


def _check(client, tier):
    upload = SimpleUploadedFile("mcp.json", FILE)
    return client.post(
        reverse(URL), {"file": upload, "format": "auto", "tier": tier, "category": ""}
    )


def test_builtin_for_every_entry_names_the_ones_that_would_run_as_local_processes(client, alice):
    client.force_login(alice)

    response = _check(client, "builtin")

    assert response.status_code == 200
    page = response.content.decode()
    warning = re.search(r'<div class="errornote" id="import-local-warning".*?</div>', page, re.S)
    assert warning is not None, "no warning before confirming"
    text = warning[0]
    assert "2 servers would run as a local process" in text
    assert "<code>notes</code>" in text
    assert "<code>shell-helper</code>" in text
    assert "hosted" not in text  # a remote server runs no process here
    # The warning comes before the button that confirms the import.
    assert page.index('id="import-local-warning"') < page.index('value="Import"')


@pytest.mark.parametrize("tier", ["", "verified", "community", "untrusted"])
def test_other_tier_choices_do_not_warn(client, alice, tier):
    client.force_login(alice)

    response = _check(client, tier)

    assert response.status_code == 200
    assert "import-local-warning" not in response.content.decode()


def test_the_plan_names_the_local_processes_only_when_builtin_is_vouched_for_all():
    builtin = import_plan(
        content=FILE, filename="mcp.json", options=ImportOptions(tier="builtin", dry_run=True)
    )
    assert [entry.slug for entry in builtin.local_processes_vouched] == ["notes", "shell-helper"]
    as_file = import_plan(content=FILE, filename="mcp.json", options=ImportOptions(dry_run=True))
    assert as_file.local_processes_vouched == []


def test_the_command_lines_plan_says_it_too():
    plan = import_plan(
        content=FILE, filename="mcp.json", options=ImportOptions(tier="builtin", dry_run=True)
    )
    assert (
        "  ! Builtin for every entry: 2 server(s) would run as a local process, unsandboxed on "
        "the workers' host (notes, shell-helper); a poisoned one among them would run with the "
        "host's access."
    ) in plan_lines(plan)
