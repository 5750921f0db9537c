"""Rotating the secrets key: after the command, the new key alone reads every stored secret."""

from __future__ import annotations

import io

import pytest
from cryptography.fernet import Fernet, InvalidToken
from django.core.management import call_command
from django.db import connection

from registry.servers.models import McpServer
from tests.factories import McpServerFactory

pytestmark = pytest.mark.django_db


def _raw_env(server):
    with connection.cursor() as cursor:
        cursor.execute("SELECT env FROM servers_mcpserver WHERE id = %s", [server.pk])
        return cursor.fetchone()[0]


def test_it_re_encrypts_with_the_first_key_so_the_old_one_can_go(settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.TOOLROOM_SECRETS_KEYS = [old]
    server = McpServerFactory(env={"API_KEY": "sk-live-0123456789abcdef"})
    before = _raw_env(server)

    settings.TOOLROOM_SECRETS_KEYS = [new, old]
    out = io.StringIO()
    call_command("rotate_secrets_key", stdout=out)

    assert "of 1 server(s)" in out.getvalue()
    assert _raw_env(server) != before
    settings.TOOLROOM_SECRETS_KEYS = [new]
    assert McpServer.objects.get(pk=server.pk).env == {"API_KEY": "sk-live-0123456789abcdef"}
    Fernet(new.encode()).decrypt(_raw_env(server).encode())  # new key alone reads it
    with pytest.raises(InvalidToken):
        Fernet(old.encode()).decrypt(_raw_env(server).encode())
