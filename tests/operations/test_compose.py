"""docker-compose.yml and its image: valid for Docker Compose and shaped as production needs.

Validation runs the real Compose CLI (`config -q` checks the file against the Compose
specification; it needs no Docker engine). `make test` installs Debian's docker-compose when no
Compose CLI is there; without one this module is skipped, which fails a CI run.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
TOOLROOM_SERVICES = ("migrate", "web", "gateway", "worker", "runtime", "beat")
LONG_RUNNING = ("web", "gateway", "worker", "runtime", "beat")
SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|TOKEN|(^|_)KEY($|_)|DATABASE_URL|CREDENTIAL")
CREDENTIALS_IN_URL = re.compile(r"://[^/@\s]*:[^/@\s]*@")


def _compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=60, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


@pytest.fixture(scope="module")
def compose_cli() -> list[str]:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no Docker Compose CLI (make test installs Debian's docker-compose)")
    return cli


def _config(cli: list[str], compose_file: Path, home: Path, **env: str):
    clean = {"PATH": os.environ["PATH"], "HOME": str(home), **env}
    return subprocess.run(
        [*cli, "--file", str(compose_file), "config", "--quiet"],
        cwd=compose_file.parent,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return loaded


# --- Validation by the Compose CLI ---------------------------------------------------------------


def test_the_compose_file_is_valid(compose_cli, tmp_path):
    result = _config(compose_cli, COMPOSE_FILE, tmp_path, TOOLROOM_HOSTNAME="toolroom.example.com")

    assert result.returncode == 0, result.stderr


def test_the_validation_does_reject_an_invalid_file(compose_cli, tmp_path):
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(
        "services:\n  web:\n    image: toolroom:local\n    depends_on:\n"
        "      db:\n        condition: when_it_feels_like_it\n  db:\n    image: postgres:16\n"
    )

    result = _config(compose_cli, broken, tmp_path)

    assert result.returncode != 0


def test_the_stack_names_the_hostname_it_needs(compose_cli, tmp_path):
    result = _config(compose_cli, COMPOSE_FILE, tmp_path)

    assert result.returncode != 0
    assert "set TOOLROOM_HOSTNAME" in result.stderr


# --- Structure -----------------------------------------------------------------------------------


def test_it_runs_the_whole_stack(compose):
    assert set(compose["services"]) >= {
        "web",
        "gateway",
        "worker",
        "runtime",
        "beat",
        "postgres",
        "redis",
        "migrate",
    }


def test_every_toolroom_service_runs_the_one_image_in_production(compose):
    services = compose["services"]
    images = {services[name]["image"] for name in TOOLROOM_SERVICES}
    assert images == {"${TOOLROOM_IMAGE:-toolroom:local}"}
    for name in TOOLROOM_SERVICES:
        assert services[name]["build"]["context"] == ".", name
        assert services[name]["environment"]["TOOLROOM_PROFILE"] == "production", name


def test_the_client_address_is_what_the_one_proxy_in_front_appended(compose):
    """uvicorn hands Toolroom the socket's address (it would otherwise take the first
    X-Forwarded-For entry, which the client wrote); Toolroom takes the last entry, the one the
    reverse proxy in front appended (registry/core/client_address.py)."""
    services = compose["services"]
    for name in ("web", "gateway"):
        command = services[name]["command"]
        assert "--no-proxy-headers" in command, name
        assert not [option for option in command if option.startswith("--forwarded-allow")], name
        assert services[name]["environment"]["TOOLROOM_TRUSTED_PROXY_HOPS"] == "1", name


def test_the_processes_are_the_web_server_the_worker_and_beat(compose):
    services = compose["services"]
    assert services["migrate"]["command"][-3:] == ["manage.py", "migrate", "--no-input"]
    assert services["web"]["command"][:2] == ["uvicorn", "registry.asgi:application"]
    assert services["gateway"]["command"][:2] == ["uvicorn", "workers.gateway.asgi:application"]
    assert services["worker"]["command"][:6] == [
        "celery",
        "-A",
        "workers",
        "worker",
        "-Q",
        "toolroom",
    ]
    assert services["discovery"]["command"][:6] == [
        "celery",
        "-A",
        "workers",
        "worker",
        "-Q",
        "discovery",
    ]
    for name in ("web", "worker", "discovery", "runtime", "beat"):
        assert "healthcheck" in services[name], name
    assert "/readyz" in " ".join(services["web"]["healthcheck"]["test"])
    for name, kind in (("worker", "worker"), ("runtime", "runtime"), ("beat", "beat")):
        assert services[name]["healthcheck"]["test"][-3:] == ["manage.py", "probe", kind]
    runtime = services["runtime"]["command"]
    assert runtime[:6] == ["celery", "-A", "workers", "worker", "-Q", "runtime"]
    assert "--pool=threads" in runtime
    assert services["beat"]["command"][:4] == ["celery", "-A", "workers", "beat"]
    assert (
        "--scheduler=django_celery_beat.schedulers:DatabaseScheduler" in services["beat"]["command"]
    )


def test_postgres_and_redis_have_healthchecks_and_volumes(compose):
    services = compose["services"]
    assert services["postgres"]["image"] == "${TOOLROOM_POSTGRES_IMAGE:-postgres:16-bookworm}"
    assert services["redis"]["image"] == "${TOOLROOM_REDIS_IMAGE:-redis:7-bookworm}"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "ping" in services["redis"]["healthcheck"]["test"]
    assert "healthcheck" in services["web"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in services["postgres"]["volumes"])


def test_services_wait_for_healthy_dependencies_and_migrations(compose):
    services = compose["services"]
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in LONG_RUNNING:
        assert services[name]["depends_on"] == {
            "migrate": {"condition": "service_completed_successfully"},
            "postgres": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
        }, name


def test_no_secret_is_a_plain_environment_value(compose):
    for name, service in compose["services"].items():
        if name == "docker-socket-proxy":
            continue  # its SECRETS: 0 switches the engine's secrets API off; it holds no secret
        environment = service.get("environment") or {}
        assert isinstance(environment, dict), f"{name}: use the mapping form"
        for key, value in environment.items():
            if SECRET_NAME.search(key):
                assert key.endswith("_FILE"), f"{name}: {key} must come from a file"
                assert str(value).startswith("/run/secrets/"), f"{name}: {key}={value}"
            assert not CREDENTIALS_IN_URL.search(str(value)), f"{name}: {key} holds credentials"


def test_every_secret_comes_from_deploy_secrets(compose):
    declared = compose["secrets"]
    for name, service in compose["services"].items():
        for secret in service.get("secrets", []):
            assert secret in declared, f"{name} uses undeclared secret {secret}"
        for key, value in (service.get("environment") or {}).items():
            if key.endswith("_FILE"):
                assert value.removeprefix("/run/secrets/") in service["secrets"], (name, key)
    for name, secret in declared.items():
        assert secret["file"] == f"./deploy/secrets/{name}"


# Read by libraries rather than by the settings: the docker SDK reads DOCKER_HOST.
READ_BY_LIBRARIES = {"DOCKER_HOST"}


def test_the_settings_read_every_variable_the_stack_sets(compose):
    settings_source = "".join(
        path.read_text()
        for path in [
            ROOT / "registry" / "settings.py",
            *(ROOT / "registry" / "settings_parts").glob("*.py"),
        ]
    )
    for name in TOOLROOM_SERVICES:
        for key in compose["services"][name]["environment"]:
            variable = key.removesuffix("_FILE")
            if variable in READ_BY_LIBRARIES:
                continue
            assert f'"{variable}"' in settings_source, f"{name}: settings never read {variable}"


def test_only_the_workers_reach_the_docker_engine_and_only_through_the_proxy(compose):
    services = compose["services"]
    mounting_the_socket = [
        name
        for name, service in services.items()
        if any("docker.sock" in str(volume) for volume in service.get("volumes", []))
    ]
    assert mounting_the_socket == ["docker-socket-proxy"]
    proxy_config = (ROOT / "deploy" / "haproxy" / "docker-socket-proxy.cfg").read_text()
    assert "http-request deny deny_status 403 if exec" in proxy_config
    assert "http-request deny deny_status 403 unless sandbox_api" in proxy_config
    assert compose["networks"]["engine"]["internal"] is True
    for name in ("worker", "runtime"):
        assert services[name]["environment"]["DOCKER_HOST"] == "tcp://docker-socket-proxy:2375"
        assert "engine" in services[name]["networks"]
    for name in ("web", "beat", "migrate", "postgres", "redis"):
        assert "engine" not in services[name].get("networks", []), name


def test_secrets_stay_out_of_git_and_out_of_the_image():
    assert "deploy/secrets" in (ROOT / ".dockerignore").read_text().split()
    ignored = subprocess.run(
        ["git", "check-ignore", "--quiet", "deploy/secrets/secret_key"],
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert ignored.returncode == 0


def test_the_image_is_multi_stage_slim_and_runs_unprivileged():
    dockerfile = DOCKERFILE.read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in dockerfile
    assert len(re.findall(r"^FROM ", dockerfile, flags=re.MULTILINE)) >= 2
    users = re.findall(r"^USER (\S+)", dockerfile, flags=re.MULTILINE)
    assert users
    assert users[-1].split(":")[0] not in ("root", "0")


def test_the_gateway_runs_two_replicas_behind_a_round_robin_balancer_without_stickiness(compose):
    services = compose["services"]
    assert services["gateway"]["scale"] == "${TOOLROOM_GATEWAY_REPLICAS:-2}"
    assert "ports" not in services["gateway"]  # reached through gateway-lb only
    balancer = services["gateway-lb"]
    assert (
        "./deploy/haproxy/gateway.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in balancer["volumes"]
    )
    directives = [
        line.split("#", 1)[0].strip()
        for line in (ROOT / "deploy" / "haproxy" / "gateway.cfg").read_text().splitlines()
    ]
    assert "balance roundrobin" in directives
    assert "server-template gateway 16 gateway:8001 check" in directives
    for sticky in ("stick", "cookie", "balance hdr", "balance source", "hash-type"):
        assert not [line for line in directives if line.startswith(sticky)], sticky
    environment = services["web"]["environment"]
    assert environment["TOOLROOM_GATEWAY_INTERNAL_URL"] == "http://gateway-lb:8001"


def test_every_image_is_a_variable_with_the_public_image_as_default(compose):
    services = compose["services"]
    assert services["web"]["build"]["args"] == {
        "PYTHON_IMAGE": "${TOOLROOM_PYTHON_IMAGE:-python:3.11-slim-bookworm}"
    }
    for name in ("gateway-lb", "docker-socket-proxy"):
        assert services[name]["image"] == "${TOOLROOM_HAPROXY_IMAGE:-haproxy:2.8-bookworm}"


def test_the_local_images_file_points_the_stack_at_the_images_make_images_builds(
    compose_cli, tmp_path
):
    result = subprocess.run(
        [*compose_cli, "--file", str(COMPOSE_FILE), "--env-file",
         str(ROOT / "deploy" / "local-images.env"), "config"],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TOOLROOM_HOSTNAME": "x.example"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    names = dict(
        line.split("=", 1)
        for line in (ROOT / "deploy" / "local-images.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert set(names) == {
        "TOOLROOM_PYTHON_IMAGE",
        "TOOLROOM_POSTGRES_IMAGE",
        "TOOLROOM_REDIS_IMAGE",
        "TOOLROOM_HAPROXY_IMAGE",
    }
    builder = (ROOT / "scripts" / "stack_images.py").read_text()
    assert all(f'variable="{variable}"' in builder for variable in names)
    assert resolved["postgres"]["image"] == names["TOOLROOM_POSTGRES_IMAGE"]
    assert resolved["redis"]["image"] == names["TOOLROOM_REDIS_IMAGE"]
    assert resolved["gateway-lb"]["image"] == names["TOOLROOM_HAPROXY_IMAGE"]
    assert resolved["web"]["build"]["args"]["PYTHON_IMAGE"] == names["TOOLROOM_PYTHON_IMAGE"]
    assert all(not name.startswith(("postgres:", "redis:", "haproxy:")) for name in names.values())


def test_the_dockerfile_builds_offline_from_host_wheels_or_online_without_them():
    dockerfile = DOCKERFILE.read_text()
    # A `# syntax=` line makes BuildKit fetch its frontend from a registry.
    assert not dockerfile.startswith("# syntax=")
    assert "COPY deploy/wheels/ /wheels/" in dockerfile
    assert "--no-index --find-links /wheels" in dockerfile
    assert "deploy/wheels" not in (ROOT / ".dockerignore").read_text()


# --- scripts/compose-secrets ---------------------------------------------------------------------


def test_compose_secrets_makes_every_secret_once(tmp_path):
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "compose-secrets", project / "scripts")

    first = subprocess.run(
        ["bash", "scripts/compose-secrets"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    secrets_dir = project / "deploy" / "secrets"
    before = {path.name: path.read_text() for path in secrets_dir.iterdir()}
    second = subprocess.run(
        ["bash", "scripts/compose-secrets"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert set(before) == {
        "secret_key",
        "secrets_key",
        "postgres_password",
        "database_url",
        "identity_key",
    }
    assert {path.name: path.read_text() for path in secrets_dir.iterdir()} == before
    assert stat.S_IMODE(secrets_dir.stat().st_mode) == 0o700
    assert len(before["secret_key"].strip()) >= 50
    Fernet(before["secrets_key"].strip().encode())
    password = before["postgres_password"].strip()
    assert before["database_url"].strip() == (
        f"postgres://toolroom:{password}@postgres:5432/toolroom"
    )
    identity_key = serialization.load_pem_private_key(before["identity_key"].encode(), None)
    assert isinstance(identity_key, ec.EllipticCurvePrivateKey)
    assert identity_key.curve.name == "secp256r1"
