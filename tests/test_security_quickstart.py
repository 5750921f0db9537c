"""Issue 11, items 12 and 15: the quickstart's SQLite files are its owner's only, and the URLs
given to agents come from one setting that follows the quickstart's port. Each check runs the
settings in a fresh process with a clean environment, as an operator's shell would."""

from __future__ import annotations

import os
import stat

import pytest

from tests.test_settings import _run, _settings

pytestmark = pytest.mark.processes

# Opens the database, writes in WAL mode, and leaves the -wal and -shm files in place.
WRITE_PROBE = """
import django
django.setup()
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE probe (x integer)")
    cursor.execute("INSERT INTO probe VALUES (1)")
    cursor.execute("PRAGMA journal_mode")
    print(cursor.fetchone()[0])
"""


def test_the_quickstart_database_and_its_wal_are_the_owners_only(tmp_path):
    data_dir = tmp_path / "data"
    env = {
        "DJANGO_SETTINGS_MODULE": "registry.settings",
        "TOOLROOM_PROFILE": "quickstart",
        "TOOLROOM_DATA_DIR": str(data_dir),
    }
    old_umask = os.umask(0o022)  # the usual umask, which made them 0644
    try:
        result = _run(["-c", WRITE_PROBE], env, tmp_path)
    finally:
        os.umask(old_umask)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "wal"
    database = data_dir / "toolroom.sqlite3"
    files = [database, data_dir / "toolroom.sqlite3-wal", data_dir / "toolroom.sqlite3-shm"]
    for path in files:
        if path.exists():  # -wal and -shm exist while a connection is open or after a crash
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name
    assert stat.S_IMODE(database.stat().st_mode) == 0o600


def test_a_database_an_older_quickstart_left_0644_is_tightened(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    database = data_dir / "toolroom.sqlite3"
    database.touch(mode=0o644)
    database.chmod(0o644)

    _settings({"TOOLROOM_PROFILE": "quickstart", "TOOLROOM_DATA_DIR": str(data_dir)}, tmp_path)

    assert stat.S_IMODE(database.stat().st_mode) == 0o600


PUBLIC_URL_PROBE = """
import django
django.setup()
from django.conf import settings
print(settings.TOOLROOM_PUBLIC_URL)
"""


@pytest.mark.parametrize(("port", "expected"), [("8005", "http://127.0.0.1:8005"), ("", None)])
def test_the_public_url_follows_the_quickstarts_port(tmp_path, port, expected):
    env = {
        "DJANGO_SETTINGS_MODULE": "registry.settings",
        "TOOLROOM_PROFILE": "quickstart",
        "TOOLROOM_DATA_DIR": str(tmp_path / "data"),
    }
    if port:
        env["PORT"] = port
    result = _run(["-c", PUBLIC_URL_PROBE], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == (expected or "http://127.0.0.1:8000")
