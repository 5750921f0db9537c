"""Settings come from the environment: each profile's rules, checked in a fresh process each time.

Every test runs `manage.py` or a short Python snippet in a subprocess with a clean environment
(nothing inherited but PATH), so what is tested is exactly what an operator's environment gives.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
# registry/settings.py and the sections it imports.
SETTINGS_FILES = [
    ROOT / "registry" / "settings.py",
    *sorted((ROOT / "registry" / "settings_parts").glob("*.py")),
]
CONFIGURATION_DOC = ROOT / "docs" / "configuration.md"

# Prints the settings a test looks at, as JSON, after Django has loaded them.
PROBE = """
import json, django
django.setup()
from django.conf import settings as s
db = s.DATABASES["default"]
print(json.dumps({
    "SECRET_KEY": s.SECRET_KEY,
    "TOOLROOM_SECRETS_KEYS": s.TOOLROOM_SECRETS_KEYS,
    "ALLOWED_HOSTS": s.ALLOWED_HOSTS,
    "DEBUG": s.DEBUG,
    "ENGINE": db["ENGINE"],
    "NAME": str(db["NAME"]),
    "HOST": db.get("HOST", ""),
    "PORT": str(db.get("PORT", "")),
    "USER": db.get("USER", ""),
    "PASSWORD": db.get("PASSWORD", ""),
    "CACHE_BACKEND": s.CACHES["default"]["BACKEND"],
    "SESSION_COOKIE_SECURE": s.SESSION_COOKIE_SECURE,
    "CSRF_COOKIE_SECURE": s.CSRF_COOKIE_SECURE,
    "SECURE_SSL_REDIRECT": s.SECURE_SSL_REDIRECT,
    "SECURE_HSTS_SECONDS": s.SECURE_HSTS_SECONDS,
    "TOOLROOM_ALLOWED_NETWORKS": s.TOOLROOM_ALLOWED_NETWORKS,
}))
"""


def _fernet_key() -> str:
    return Fernet.generate_key().decode()


def _production_env(data_dir: Path) -> dict[str, str]:
    return {
        "TOOLROOM_PROFILE": "production",
        "TOOLROOM_DATA_DIR": str(data_dir),
        "SECRET_KEY": "k" * 20 + "-a-long-production-secret-key-for-the-tests-0123456789",
        "TOOLROOM_SECRETS_KEY": _fernet_key(),
        "ALLOWED_HOSTS": "toolroom.example.com",
    }


def _run(args: list[str], env: dict[str, str], home: Path) -> subprocess.CompletedProcess[str]:
    clean = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8", **env}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _manage(env: dict[str, str], home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(["manage.py", *args], env, home)


def _settings(env: dict[str, str], home: Path) -> dict[str, Any]:
    result = _run(["-c", PROBE], {"DJANGO_SETTINGS_MODULE": "registry.settings", **env}, home)
    assert result.returncode == 0, result.stderr
    loaded: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


# --- production --------------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["SECRET_KEY", "TOOLROOM_SECRETS_KEY", "ALLOWED_HOSTS"])
def test_production_refuses_to_start_without_a_required_setting(tmp_path, missing):
    env = _production_env(tmp_path)
    del env[missing]

    result = _manage(env, tmp_path, "check")

    assert result.returncode != 0
    assert f"{missing} must be set in the production profile" in result.stderr


def test_production_is_the_default_profile(tmp_path):
    env = _production_env(tmp_path)
    del env["TOOLROOM_PROFILE"], env["SECRET_KEY"]

    result = _manage(env, tmp_path, "check")

    assert result.returncode != 0
    assert "SECRET_KEY must be set in the production profile" in result.stderr


def test_a_command_without_a_profile_says_in_one_line_what_to_set(tmp_path):
    result = _manage({"TOOLROOM_DATA_DIR": str(tmp_path)}, tmp_path, "mcp", "status")

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0
    assert "SECRET_KEY must be set in the production profile" in result.stderr
    assert "TOOLROOM_PROFILE is not set" in result.stderr
    assert "TOOLROOM_PROFILE=quickstart" in result.stderr


def test_a_command_does_not_print_the_sign_in_lockout_banner(tmp_path):
    result = _manage(
        {"TOOLROOM_PROFILE": "test", "TOOLROOM_DATA_DIR": str(tmp_path)}, tmp_path, "check"
    )

    assert result.returncode == 0, result.stderr
    assert "AXES" not in result.stdout + result.stderr


def test_an_unknown_profile_is_refused_by_name(tmp_path):
    result = _manage(
        {"TOOLROOM_PROFILE": "staging", "TOOLROOM_DATA_DIR": str(tmp_path)}, tmp_path, "check"
    )

    assert result.returncode != 0
    assert "TOOLROOM_PROFILE='staging' is not one of production, quickstart, test" in result.stderr


def test_production_secrets_can_come_from_files(tmp_path):
    secrets_dir = tmp_path / "run-secrets"
    secrets_dir.mkdir()
    secret_key = "file-secret-key-" + "s" * 50
    fernet_key = _fernet_key()
    (secrets_dir / "secret_key").write_text(secret_key + "\n")
    (secrets_dir / "secrets_key").write_text(fernet_key + "\n")
    (secrets_dir / "database_url").write_text(
        "postgres://toolroom:from-a-file@db.internal:5432/toolroom\n"
    )
    env = _production_env(tmp_path)
    del env["SECRET_KEY"], env["TOOLROOM_SECRETS_KEY"]
    env["SECRET_KEY_FILE"] = str(secrets_dir / "secret_key")
    env["TOOLROOM_SECRETS_KEY_FILE"] = str(secrets_dir / "secrets_key")
    env["DATABASE_URL_FILE"] = str(secrets_dir / "database_url")

    loaded = _settings(env, tmp_path)

    assert loaded["SECRET_KEY"] == secret_key
    assert loaded["TOOLROOM_SECRETS_KEYS"] == [fernet_key]
    assert loaded["ENGINE"] == "registry.core.postgresql"  # Django's, with the outage circuit
    assert (loaded["NAME"], loaded["PASSWORD"]) == ("toolroom", "from-a-file")


def test_production_passes_the_deployment_checks(tmp_path):
    result = _manage(
        _production_env(tmp_path), tmp_path, "check", "--deploy", "--fail-level", "WARNING"
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_defaults_are_the_safe_ones(tmp_path):
    loaded = _settings(_production_env(tmp_path), tmp_path)

    assert loaded["DEBUG"] is False
    assert loaded["SESSION_COOKIE_SECURE"] is True
    assert loaded["CSRF_COOKIE_SECURE"] is True
    assert loaded["SECURE_SSL_REDIRECT"] is True
    assert loaded["SECURE_HSTS_SECONDS"] >= 31_536_000
    assert loaded["TOOLROOM_ALLOWED_NETWORKS"] == []
    assert loaded["ALLOWED_HOSTS"] == ["toolroom.example.com"]


# --- quickstart --------------------------------------------------------------------------------


def test_quickstart_generates_its_keys_once_and_reuses_them(tmp_path):
    env = {"TOOLROOM_PROFILE": "quickstart", "TOOLROOM_DATA_DIR": str(tmp_path / "data")}

    first = _settings(env, tmp_path)
    second = _settings(env, tmp_path)

    assert len(first["SECRET_KEY"]) >= 50
    Fernet(first["TOOLROOM_SECRETS_KEYS"][0].encode())  # a usable encryption key
    assert second["SECRET_KEY"] == first["SECRET_KEY"]
    assert second["TOOLROOM_SECRETS_KEYS"] == first["TOOLROOM_SECRETS_KEYS"]
    for name in ("secret_key", "secrets_key"):
        path = tmp_path / "data" / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
    # The folder also holds the SQLite database: nobody but its owner may enter it.
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700


def test_quickstart_keeps_sqlite_and_its_cache_in_the_data_dir(tmp_path):
    data_dir = tmp_path / "data"
    loaded = _settings(
        {"TOOLROOM_PROFILE": "quickstart", "TOOLROOM_DATA_DIR": str(data_dir)}, tmp_path
    )

    assert loaded["ENGINE"] == "django.db.backends.sqlite3"
    assert loaded["NAME"] == str(data_dir / "toolroom.sqlite3")
    assert loaded["CACHE_BACKEND"].endswith("FileBasedCache")
    assert loaded["TOOLROOM_ALLOWED_NETWORKS"] == ["127.0.0.0/8", "::1/128"]
    assert loaded["SECURE_SSL_REDIRECT"] is False


# --- shared ------------------------------------------------------------------------------------


def test_database_url_selects_postgresql(tmp_path):
    env = _production_env(tmp_path)
    env["DATABASE_URL"] = "postgres://toolroom:pw@db.example.com:5433/toolroom"

    loaded = _settings(env, tmp_path)

    assert loaded["ENGINE"] == "registry.core.postgresql"  # Django's, with the outage circuit
    assert (loaded["NAME"], loaded["HOST"], loaded["PORT"], loaded["USER"]) == (
        "toolroom",
        "db.example.com",
        "5433",
        "toolroom",
    )


def test_redis_url_selects_the_redis_cache(tmp_path):
    env = _production_env(tmp_path)
    env["REDIS_URL"] = "redis://redis.internal:6379/0"

    loaded = _settings(env, tmp_path)

    assert loaded["CACHE_BACKEND"] == "django.core.cache.backends.redis.RedisCache"


def _variables_read_by_settings() -> set[str]:
    source = "".join(path.read_text() for path in SETTINGS_FILES)
    names = set(re.findall(r"env(?:\.\w+)?\(\s*\"([A-Z][A-Z0-9_]+)\"", source))
    names |= set(re.findall(r"\brequired\(\s*\"([A-Z][A-Z0-9_]+)\"", source))
    return names


def test_every_environment_variable_the_settings_read_is_documented():
    names = _variables_read_by_settings()
    documented = CONFIGURATION_DOC.read_text()

    assert len(names) > 10, "the pattern no longer finds the settings' variables"
    missing = sorted(name for name in names if f"`{name}`" not in documented)
    assert not missing, f"docs/configuration.md does not document: {', '.join(missing)}"
