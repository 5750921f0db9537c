"""Only secret values are masked: an env value an admin marked as not secret (a path) is shown in
errors, the gateway's included, and on the server page; the others stay masked."""

from __future__ import annotations

import anyio
import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from registry.core.secret_fields import secret_redact
from tests.factories import McpServerFactory
from workers.gateway.masking import SecretMask

pytestmark = pytest.mark.django_db

PATH = "/data/memory.jsonl"
KEY = "sk-live-Zq8WkLmN4pRtY7vB2cX9dF6gH1jK3sA5"
ERROR = f"ENOENT: no such file or directory, open '{PATH}.tmp' (key {KEY})"


def _server(**fields):
    return McpServerFactory(
        env={"MEMORY_FILE_PATH": PATH, "API_KEY": KEY},
        env_not_secret=["MEMORY_FILE_PATH"],
        **fields,
    )


def test_a_value_marked_not_secret_is_shown_in_errors_and_the_rest_masked():
    masked = secret_redact(ERROR, _server().secret_values())

    assert PATH in masked
    assert KEY not in masked


def test_without_the_mark_the_path_is_masked_as_before():
    server = McpServerFactory(env={"MEMORY_FILE_PATH": PATH, "API_KEY": KEY})

    masked = secret_redact(ERROR, server.secret_values())

    assert PATH not in masked
    assert KEY not in masked


@pytest.mark.django_db(transaction=True)  # the mask reads the server from a thread of its own
def test_the_gateway_shows_a_value_marked_not_secret_in_a_call_error():
    server = _server()

    masked = anyio.run(SecretMask().text, server.pk, None, ERROR)

    assert PATH in masked
    assert KEY not in masked


def test_only_names_of_the_env_can_be_marked_not_secret():
    server = McpServerFactory(env={"API_KEY": KEY}, env_not_secret=["MEMORY_FILE_PATH"])

    with pytest.raises(ValidationError, match="MEMORY_FILE_PATH: not in the server's env"):
        server.full_clean()


def test_the_server_page_shows_the_value_marked_not_secret(client, alice):
    server = _server()
    client.force_login(alice)

    page = client.get(reverse("admin:servers_mcpserver_change", args=[server.pk])).content.decode()

    assert f"MEMORY_FILE_PATH={PATH}" in page
    assert KEY not in page
