"""The embedded default's broker in files: a message file is written whole before any reader can
take it, and a message still being written (`.part`) is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kombu import Connection

from registry.core import file_broker

REPO = Path(__file__).resolve().parents[2]


def _connection(folder: Path) -> Connection:
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "processed_folder": str(folder / "processed"),
        "store_processed": False,
    }
    return Connection("filesystem://localhost/", transport_options=options)


def test_the_quickstarts_settings_send_filesystem_messages_through_the_atomic_writer(tmp_path):
    """Every process that loads the embedded default's settings (web, worker, beat)."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL"}
    }
    environment |= {
        "TOOLROOM_PROFILE": "quickstart",
        "TOOLROOM_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "registry.settings",
    }
    script = (
        "import django; django.setup(); from django.conf import settings; "
        "from kombu.transport import TRANSPORT_ALIASES; "
        "print(settings.CELERY_BROKER_URL, TRANSPORT_ALIASES['filesystem'])"
    )
    printed = subprocess.run(
        [sys.executable, "-c", script],
        env=environment,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert printed == ["filesystem://localhost/", "registry.core.file_broker:Transport"]


def test_a_message_is_renamed_into_place_and_read_back(tmp_path):
    with _connection(tmp_path) as connection:
        channel = connection.default_channel
        assert isinstance(channel, file_broker.Channel)
        channel._put("jobs", {"body": "hello"})

        names = sorted(path.name for path in tmp_path.iterdir() if path.is_file())
        assert len(names) == 1, names
        assert names[0].endswith(".jobs.msg"), names
        assert channel._get("jobs") == {"body": "hello"}


def test_a_message_still_being_written_is_not_taken(tmp_path):
    """What kombu's own writer left visible (an empty `.msg` file, a JSONDecodeError in the
    reader) is a `.part` file here, which the reader skips."""
    (tmp_path / ".1_half.jobs.msg.part").write_bytes(b"")
    with _connection(tmp_path) as connection:
        channel = connection.default_channel
        channel._put("jobs", {"body": "whole"})

        assert channel._get("jobs") == {"body": "whole"}
        assert (tmp_path / ".1_half.jobs.msg.part").exists()
