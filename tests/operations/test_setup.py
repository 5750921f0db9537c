"""The set-up scripts' decisions: which Python `make` uses, and stopping at once when a service
cannot be had, with a message naming what to install.

Each test runs the real shell code with a PATH it builds: a few system tools plus fake
interpreters (wrappers around this Python that make it look older, or lack `ensurepip`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.mcp_fixtures import free_port

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "scripts" / "lib.sh"
TOOLS = ("bash", "sh", "dirname", "basename", "id", "timeout", "sleep", "mkdir", "cat", "tail")


@pytest.fixture
def system_bin(tmp_path: Path) -> Path:
    """A directory holding only the basic tools the scripts use (no Python, Redis or apt-get)."""
    directory = tmp_path / "system-bin"
    directory.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run these tests"
        (directory / tool).symlink_to(found)
    return directory


def _fake_python(directory: Path, name: str, sitecustomize: str = "", exit_code: int | None = None):
    """A wrapper named `name` that runs this Python, with `sitecustomize` loaded first."""
    directory.mkdir(exist_ok=True)
    wrapper = directory / name
    if exit_code is not None:  # like a pyenv shim for a version that is not active
        wrapper.write_text(f"#!/bin/sh\necho '{name}: command not found' >&2\nexit {exit_code}\n")
    else:
        site = directory / f"{name}-site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(sitecustomize)
        wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


PRETEND_3_10 = "import sys\nsys.version_info = (3, 10, 14, 'final', 0)\n"
WITHOUT_ENSUREPIP = "import sys\nsys.modules['ensurepip'] = None  # as on Debian without -venv\n"


def _find_python(path: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f'source "{LIB}" && find_python'],
        env={"PATH": path, "NO_COLOR": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_it_skips_interpreters_that_do_not_run_and_takes_the_first_good_one(tmp_path, system_bin):
    fakes = tmp_path / "fakes"
    _fake_python(fakes, "python3.13", exit_code=127)
    good = _fake_python(fakes, "python3")

    result = _find_python(f"{fakes}:{system_bin}")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(good)


def test_it_refuses_a_python_older_than_3_11(tmp_path, system_bin):
    fakes = tmp_path / "fakes"
    _fake_python(fakes, "python3", PRETEND_3_10)

    result = _find_python(f"{fakes}:{system_bin}")

    assert result.returncode == 1
    assert "Toolroom needs Python 3.11 or newer" in result.stderr
    assert "python3 (3.10)" in result.stderr
    assert "apt-get install python3 python3-venv" in result.stderr


def test_it_names_the_venv_package_when_ensurepip_is_missing(tmp_path, system_bin):
    fakes = tmp_path / "fakes"
    _fake_python(fakes, "python3", WITHOUT_ENSUREPIP)
    minor = sys.version_info[1]

    result = _find_python(f"{fakes}:{system_bin}")

    assert result.returncode == 1
    assert "cannot create virtual environments" in result.stderr
    assert f"apt-get install python3.{minor}-venv" in result.stderr


def test_python_names_the_interpreter_to_use(tmp_path, system_bin):
    fakes = tmp_path / "fakes"
    _fake_python(fakes, "python3")
    chosen = _fake_python(tmp_path / "elsewhere", "my-python")

    result = _find_python(f"{fakes}:{system_bin}", PYTHON=str(chosen))

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(chosen)


def _ensure_services(system_bin: Path, *services: str, **env: str):
    started = time.monotonic()
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ensure-services"), *services],
        env={"PATH": str(system_bin), "NO_COLOR": "1", "HOME": str(system_bin), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return result, time.monotonic() - started


def test_without_redis_or_apt_get_it_stops_at_once_naming_what_to_install(system_bin):
    result, seconds = _ensure_services(
        system_bin, "redis", REDIS_URL=f"redis://127.0.0.1:{free_port()}/15"
    )

    assert result.returncode == 1
    assert "Redis (redis-server) is needed and missing" in result.stderr
    assert "brew install redis" in result.stderr
    assert seconds < 10


def test_an_unreachable_remote_redis_is_named_not_installed(system_bin):
    result, _ = _ensure_services(system_bin, "redis", REDIS_URL="redis://redis.invalid:6379/0")

    assert result.returncode == 1
    assert "Redis at redis.invalid:6379 (REDIS_URL) does not answer" in result.stderr


def test_a_port_taken_by_something_else_is_not_mistaken_for_redis(system_bin):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]

        result, _ = _ensure_services(system_bin, "redis", REDIS_URL=f"redis://127.0.0.1:{port}/0")

    assert result.returncode == 1
    assert f"Something that is not Redis listens on 127.0.0.1:{port}" in result.stderr


def test_without_a_compose_cli_or_apt_get_it_names_what_to_install(system_bin):
    result, seconds = _ensure_services(system_bin, "compose")

    assert result.returncode == 1
    assert "Docker Compose (to validate docker-compose.yml) is needed and missing" in result.stderr
    assert seconds < 10


def test_a_local_redis_that_answers_is_used_as_it_is(system_bin):
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")

    result, _ = _ensure_services(system_bin, "redis", REDIS_URL=redis_url)

    assert result.returncode == 0, result.stderr
    assert "Redis answers at" in result.stdout


def test_an_unreachable_remote_postgresql_is_named(system_bin):
    result, _ = _ensure_services(
        system_bin, "postgres", DATABASE_URL="postgres://toolroom@db.invalid:5432/toolroom"
    )

    assert result.returncode == 1
    assert "PostgreSQL at db.invalid:5432 (DATABASE_URL) does not answer" in result.stderr


def test_a_local_postgresql_that_cannot_be_started_here_says_what_to_do(system_bin):
    url = f"postgres://postgres@127.0.0.1:{free_port()}/toolroom"

    result, seconds = _ensure_services(system_bin, "postgres", DATABASE_URL=url)

    assert result.returncode == 1
    assert "unset DATABASE_URL to run on SQLite" in result.stderr
    assert seconds < 10


def test_without_database_url_postgresql_is_not_needed(system_bin):
    result, _ = _ensure_services(system_bin, "postgres")

    assert result.returncode == 0, result.stderr
