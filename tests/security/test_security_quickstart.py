"""Issue 11, items 12 and 15: the quickstart's SQLite files are its owner's only, and the URLs
given to agents come from one setting that follows the quickstart's port. Issue 26, Low 4: so
are the data folder and the embedded broker's folders. Each check runs the
settings in a fresh process with a clean environment, as an operator's shell would."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.core.test_settings import _run, _settings

pytestmark = pytest.mark.processes

LIB_SH = Path(__file__).resolve().parents[2] / "scripts" / "lib.sh"

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


# Sends a task through the embedded (file) broker, as the web process does, and prints where its
# message lies.
BROKER_PROBE = """
import django
django.setup()
from django.conf import settings
from workers.celery import app
app.send_task("toolroom.probe.nothing", args=["a task argument"])
import pathlib
queue = pathlib.Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
print(sorted(str(p) for p in queue.iterdir())[0])
"""


@pytest.fixture
def open_parent():
    """A folder every local user may enter (pytest's own tmp_path is its owner's only, which
    would hide what this test checks)."""
    folder = Path(tempfile.mkdtemp(prefix="toolroom-var-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_the_data_folder_and_the_embedded_broker_are_the_owners_only(tmp_path, open_parent):
    """Issue 26, Low 4: `var/` was 0755 (the set-up scripts made it first) and the broker's
    folders and messages under it world-readable. Settings make and tighten them to 0700."""
    data_dir = open_parent / "data"
    old_umask = os.umask(0o022)
    try:
        data_dir.mkdir(mode=0o755)  # as `mkdir -p var/log` left it
        env = {
            "DJANGO_SETTINGS_MODULE": "registry.settings",
            "TOOLROOM_PROFILE": "quickstart",
            "TOOLROOM_DATA_DIR": str(data_dir),
        }
        result = _run(["-c", BROKER_PROBE], env, tmp_path)
    finally:
        os.umask(old_umask)

    assert result.returncode == 0, result.stderr
    message = Path(result.stdout.strip().splitlines()[-1])
    assert message.is_relative_to(data_dir / "broker")
    for folder in [data_dir, *(data_dir / "broker" / name for name in ("", "queue", "control"))]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    if os.getuid() == 0:
        # Another local user (nobody) cannot read the queued message.
        other = subprocess.run(
            ["cat", str(message)], user=65534, capture_output=True, text=True, check=False
        )
        assert other.returncode != 0
        assert "Permission denied" in other.stderr


def test_the_set_up_scripts_make_var_for_its_owner_only(tmp_path):
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "lib.sh").write_text(LIB_SH.read_text())
    result = subprocess.run(
        ["bash", "-c", 'umask 022; source scripts/lib.sh; var_mkdir "$SETUP_LOG_DIR"'],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE((root / "var").stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "var" / "log").stat().st_mode) == 0o700


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
