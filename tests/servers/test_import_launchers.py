"""Launcher command lines (npx, uvx, docker run...) imported as pinned package and image
references, and run in the sandbox: against the real PyPI, npm registry and Docker engine."""

from __future__ import annotations

import io
import json

import httpx2
import pytest
from django.core.management import call_command
from django.urls import reverse

from registry.audit.models import AuditEvent
from registry.servers.importing import (
    ImportFileError,
    ImportOptions,
    export_servers,
    import_apply,
    import_plan,
)
from registry.servers.importing.launchers import LauncherError, launcher_parse
from registry.servers.models import McpServer
from tests.discovery_helpers import discover_inline
from tests.factories import McpServerFactory
from tests.sandbox_images import ensure_node_test_image, ensure_test_images
from tests.servers.test_admin_servers import _form_data as admin_form_data
from workers.adapters.sandbox.images import NODE_VERSION
from workers.sandboxing import package_command

MEMORY = "@modelcontextprotocol/server-memory"


def _newest_on_npm(name: str) -> str:
    response = httpx2.get(f"https://registry.npmjs.org/{name.replace('/', '%2F')}", timeout=30)
    return str(response.json()["dist-tags"]["latest"])


def _newest_on_pypi(name: str) -> str:
    response = httpx2.get(f"https://pypi.org/pypi/{name}/json", timeout=30)
    return str(response.json()["info"]["version"])


def _plan(servers, **options):
    content = json.dumps({"mcpServers": servers}).encode()
    return import_plan(content=content, filename="mcp.json", options=ImportOptions(**options))


def _entry(plan, slug):
    return next(entry for entry in plan.entries if entry.slug == slug)


# --- Reading launcher command lines (no network: every version here is given) ---------------


@pytest.mark.parametrize(
    ("argv", "registry", "identifier", "version", "arguments"),
    [
        (["npx", "-y", "@scope/server@1.2.3", "/data"], "npm", "@scope/server", "1.2.3", ["/data"]),
        (["npx", "--yes", "server@latest"], "npm", "server", "", []),
        (["pnpm", "dlx", "server@2.0.0", "--port", "1"], "npm", "server", "2.0.0", ["--port", "1"]),
        (["bunx", "server@2.0.0"], "npm", "server", "2.0.0", []),
        (
            ["uvx", "mcp-server-time==2026.10.19", "--tz", "UTC"],
            "pypi",
            "mcp-server-time",
            "2026.10.19",
            ["--tz", "UTC"],
        ),
        (["uvx", "mcp-server-time@2026.10.19"], "pypi", "mcp-server-time", "2026.10.19", []),
        (["uv", "tool", "run", "mcp-server-git"], "pypi", "mcp-server-git", "", []),
        (["pipx", "run", "mcp-server-git==1.0"], "pypi", "mcp-server-git", "1.0", []),
        (["/usr/local/bin/uvx", "mcp-server-git"], "pypi", "mcp-server-git", "", []),
        (
            ["docker", "run", "-i", "--rm", "mcp/fetch:1.0", "--x"],
            "oci",
            "mcp/fetch",
            "1.0",
            ["--x"],
        ),
    ],
)
def test_it_reads_each_launcher_as_a_package_and_the_arguments_after_it(
    argv, registry, identifier, version, arguments
):
    launcher = launcher_parse(argv)

    assert launcher is not None
    assert (launcher.registry, launcher.identifier, launcher.version) == (
        registry,
        identifier,
        version,
    )
    assert list(launcher.arguments) == arguments


def test_it_keeps_the_program_that_uvx_from_names():
    launcher = launcher_parse(["uvx", "--from", "mcp-proxy-tools==1.0", "proxy-cli", "--a"])

    assert launcher is not None
    assert (launcher.identifier, launcher.program, launcher.arguments) == (
        "mcp-proxy-tools",
        "proxy-cli",
        ("--a",),
    )
    assert launcher.argv() == ["uvx", "--from", "mcp-proxy-tools==1.0", "proxy-cli", "--a"]


def test_commands_that_are_not_launchers_are_left_alone():
    assert launcher_parse(["python", "-m", "server"]) is None
    assert launcher_parse(["npm", "start"]) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["npx", "-y", "server@^1"],
        ["npx", "-y", "server@1.x"],
        ["npx", "-y", "server@>=1.0.0"],
        ["uvx", "server>=1.0"],
        ["uvx", "server~=1.0"],
        ["uvx", "server==1.*"],
    ],
)
def test_it_refuses_a_version_range(argv):
    with pytest.raises(LauncherError, match="version range"):
        launcher_parse(argv)


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["npx", "-y", "./server"], "not a package on the npm registry"),
        (["uvx", "git+https://example.com/server"], "not a package on PyPI"),
        (["uvx", "--with", "extra", "server==1.0"], "--with"),
        (["docker", "run", "--mystery", "image"], "not understood"),
        (["docker", "run", "-i", "--rm"], "no image"),
    ],
)
def test_it_refuses_what_it_cannot_run_as_written(argv, why):
    with pytest.raises(LauncherError, match=why):
        launcher_parse(argv)


# --- Importing ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_range_is_refused_naming_the_entry():
    with pytest.raises(ImportFileError) as excinfo:
        _plan({"memory": {"command": "npx", "args": ["-y", f"{MEMORY}@^1"]}})

    [problem] = excinfo.value.problems
    assert (problem.entry, problem.field) == ("memory", "command")
    assert "version range" in problem.message


@pytest.mark.django_db
def test_a_package_the_registry_does_not_have_is_refused_naming_the_entry():
    with pytest.raises(ImportFileError) as excinfo:
        _plan({"ghost": {"command": "uvx", "args": ["toolroom-no-such-package-4f1c2b9e"]}})

    [problem] = excinfo.value.problems
    assert problem.entry == "ghost"
    assert "PyPI has no package named toolroom-no-such-package-4f1c2b9e" in problem.message


@pytest.mark.django_db
def test_docker_run_loses_the_loosening_flags_and_says_which():
    plan = _plan(
        {
            "fetch": {
                "command": "docker",
                "args": [
                    "run",
                    "-i",
                    "--rm",
                    "--privileged",
                    "-v",
                    "/:/host",
                    "--network",
                    "host",
                    "--cap-add",
                    "SYS_ADMIN",
                    "-p",
                    "8080:80",
                    "-e",
                    "TOKEN",
                    "-e",
                    "MODE=fast",
                    "mcp/fetch:1.4",
                    "--ignore-robots-txt",
                ],
                "env": {"TOKEN": "secret-value"},
            }
        }
    )

    entry = _entry(plan, "fetch")
    command = entry.values["command"]
    assert command == [
        "docker",
        "run",
        "-i",
        "--rm",
        "-e",
        "TOKEN",
        "-e",
        "MODE",
        "mcp/fetch:1.4",
        "--ignore-robots-txt",
    ]
    assert entry.values["image"] == "mcp/fetch:1.4"
    assert entry.values["env"] == {"TOKEN": "secret-value", "MODE": "fast"}
    [dropped] = [w for w in entry.warnings if "not carried over" in w]
    for option in ("--privileged", "-v /:/host", "--network host", "--cap-add SYS_ADMIN", "-p"):
        assert option in dropped


@pytest.mark.django_db
def test_an_unpinned_package_is_pinned_in_the_plan_the_audit_and_the_dry_run(alice):
    servers = {
        "memory": {"command": "npx", "args": ["-y", MEMORY]},
        "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone", "UTC"]},
    }
    newest_memory, newest_time = _newest_on_npm(MEMORY), _newest_on_pypi("mcp-server-time")

    plan = _plan(servers, dry_run=True)
    memory, time = _entry(plan, "memory"), _entry(plan, "time")
    assert memory.values["command"] == ["npx", "-y", f"{MEMORY}@{newest_memory}"]
    assert (memory.values["package_registry"], memory.values["package_version"]) == (
        "npm",
        newest_memory,
    )
    assert time.values["command"] == [
        "uvx",
        f"mcp-server-time=={newest_time}",
        "--local-timezone",
        "UTC",
    ]
    assert any(f"pinned to {newest_time}" in warning for warning in time.warnings)
    assert McpServer.objects.count() == 0

    import_apply(plan=_plan(servers), actor=alice)

    pins = AuditEvent.objects.filter(action="server.package_pinned").order_by("id")
    assert [(event.details["identifier"], event.details["version"]) for event in pins] == [
        (MEMORY, newest_memory),
        ("mcp-server-time", newest_time),
    ]


@pytest.mark.django_db
def test_the_dry_run_command_prints_the_pin(tmp_path):
    path = tmp_path / "mcp.json"
    time = {"command": "uvx", "args": ["mcp-server-time"]}
    path.write_text(json.dumps({"mcpServers": {"time": time}}))
    out = io.StringIO()

    call_command("import_servers", str(path), "--dry-run", stdout=out)

    newest = _newest_on_pypi("mcp-server-time")
    assert f"pinned to {newest}, the newest version PyPI served at import" in out.getvalue()
    assert McpServer.objects.count() == 0


@pytest.mark.django_db
def test_export_writes_the_launcher_form_back_and_it_imports_unchanged(alice):
    servers = {
        "time": {"command": "uvx", "args": ["mcp-server-time==2026.10.19"]},
        "fetch": {
            "command": "docker",
            "args": ["run", "-i", "--rm", "-e", "K", "mcp/fetch:1.4"],
            "env": {"K": "v"},
        },
    }
    import_apply(plan=_plan(servers), actor=alice)

    exported = json.loads(export_servers("mcp-json", include_secrets=True))["mcpServers"]

    assert exported["time"] == {"command": "uvx", "args": ["mcp-server-time==2026.10.19"]}
    assert exported["fetch"]["command"] == "docker"
    assert exported["fetch"]["args"] == ["run", "-i", "--rm", "-e", "K", "mcp/fetch:1.4"]
    again = import_plan(
        content=json.dumps({"mcpServers": exported}).encode(),
        filename="mcp.json",
        options=ImportOptions(),
    )
    assert {entry.slug: entry.action.value for entry in again.entries} == {
        "time": "unchanged",
        "fetch": "unchanged",
    }


# --- And they run in the sandbox ---------------------------------------------------------------


@pytest.mark.containers
@pytest.mark.django_db(transaction=True)
def test_npx_uvx_and_docker_run_entries_are_discovered_in_the_sandbox(alice):
    images = ensure_test_images(say=lambda *_: None)
    ensure_node_test_image(say=lambda *_: None)
    servers = {
        "memory": {"command": "npx", "args": ["-y", MEMORY]},
        "time": {"command": "uvx", "args": ["mcp-server-time"]},
        "honest": {
            "command": "docker",
            "args": [
                "run",
                "-i",
                "--rm",
                images.servers.reference,
                "python",
                "/opt/servers/honest.py",
            ],
        },
    }
    import_apply(plan=_plan(servers), actor=alice)

    tool_counts = {}
    for slug in ("memory", "time", "honest"):
        server = McpServer.objects.get(slug=slug)
        assert server.isolation == "sandbox", slug  # imported untrusted
        run = discover_inline(server)
        assert run.status == "succeeded", (slug, run.error)
        tool_counts[slug] = server.tools.count()

    assert tool_counts == {"memory": 9, "time": 2, "honest": 2}
    memory = McpServer.objects.get(slug="memory")
    assert memory.status.sandbox_image.startswith(
        "toolroom/npm-modelcontextprotocol-server-memory:"
    )
    honest = McpServer.objects.get(slug="honest")
    assert honest.status.sandbox_image == images.servers.reference
    # The vetting report says what ran: which image, which command inside it.
    assert honest.status.vetting_report["launched"] == {
        "image": images.servers.reference,
        "digest": images.servers.digest,
        "command": ["python", "/opt/servers/honest.py"],
        "network": "none",
    }
    assert memory.status.vetting_report["launched"]["command"] == ["mcp-server-memory"]
    assert memory.status.vetting_report["launched"]["node_version"] == NODE_VERSION


# --- The admin form and servers registered before --------------------------------------------


@pytest.mark.django_db
def test_the_admin_form_stores_a_launcher_as_a_pinned_package(client, alice):
    client.force_login(alice)
    response = client.post(
        reverse("admin:servers_mcpserver_add"),
        admin_form_data(command=f"npx\n-y\n{MEMORY}", trust_tier="untrusted"),
        follow=True,
    )

    newest = _newest_on_npm(MEMORY)
    server = McpServer.objects.get(slug="weather")
    assert server.command == ["npx", "-y", f"{MEMORY}@{newest}"]
    assert (server.package_registry, server.package_identifier, server.package_version) == (
        "npm",
        MEMORY,
        newest,
    )
    assert AuditEvent.objects.get(action="server.package_pinned").details["version"] == newest
    assert any(f"pinned to {newest}" in str(m) for m in response.context["messages"])


@pytest.mark.django_db
def test_the_admin_form_refuses_a_range_on_the_command(client, alice):
    client.force_login(alice)
    response = client.post(
        reverse("admin:servers_mcpserver_add"),
        admin_form_data(command="uvx\nmcp-server-time>=2026"),
    )

    assert response.status_code == 200
    assert "version range" in response.context["adminform"].form.errors["command"][0]
    assert not McpServer.objects.exists()


@pytest.mark.django_db
def test_adopt_launchers_pins_servers_registered_before(alice):
    old = McpServerFactory(slug="time", command=["uvx", "mcp-server-time", "--local-timezone=UTC"])
    local = McpServerFactory(slug="local", command=["python", "-m", "server"])
    docker = McpServerFactory(
        slug="fetch",
        command=["docker", "run", "-i", "--rm", "--privileged", "-e", "K=v", "mcp/fetch:1.4"],
    )
    out = io.StringIO()

    call_command("adopt_launchers", "--dry-run", stdout=out)
    old.refresh_from_db()
    assert old.package_registry == ""
    assert "~ time: would change" in out.getvalue()

    call_command("adopt_launchers", stdout=io.StringIO())

    newest = _newest_on_pypi("mcp-server-time")
    old.refresh_from_db()
    local.refresh_from_db()
    docker.refresh_from_db()
    assert old.command == ["uvx", f"mcp-server-time=={newest}", "--local-timezone=UTC"]
    assert (old.package_registry, old.package_version) == ("pypi", newest)
    assert local.command == ["python", "-m", "server"]
    assert local.package_registry == ""
    assert docker.image == "mcp/fetch:1.4"
    assert docker.command == ["docker", "run", "-i", "--rm", "-e", "K", "mcp/fetch:1.4"]
    assert docker.env == {"K": "v"}
    assert AuditEvent.objects.filter(action="server.package_pinned", server_id=old.pk).exists()


# --- Said before it fails: commands the sandbox cannot run -------------------------------------


@pytest.mark.django_db
def test_the_import_warns_of_host_paths_and_programs_the_image_lacks():
    plan = _plan(
        {
            "script": {"command": "python3", "args": ["/home/me/servers/weather.py"]},
            "binary": {"command": "/usr/local/bin/weather-mcp"},
            "missing": {"command": "weather-mcp", "args": ["--stdio"]},
            "fine": {"command": "python3", "args": ["-m", "http.server"]},
        }
    )

    def sandbox_warnings(slug):
        return [w for w in _entry(plan, slug).warnings if "sandbox" in w]

    assert "'/home/me/servers/weather.py' is a file on this host" in sandbox_warnings("script")[0]
    assert "'/usr/local/bin/weather-mcp' is a path on this host" in sandbox_warnings("binary")[0]
    assert "`weather-mcp` is not in the sandbox's base images" in sandbox_warnings("missing")[0]
    assert sandbox_warnings("fine") == []
    for slug in ("script", "binary", "missing"):
        assert "import the file again with `--tier builtin`" in sandbox_warnings(slug)[0]


@pytest.mark.django_db
def test_a_reimport_with_tier_builtin_runs_a_host_program_as_a_local_process(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"weather": {"command": "/usr/local/bin/weather-mcp"}}}')
    call_command("import_servers", str(path), stdout=io.StringIO())
    assert McpServer.objects.get(slug="weather").isolation == "sandbox"
    out = io.StringIO()

    call_command("import_servers", str(path), "--tier", "builtin", "--update", stdout=out)

    server = McpServer.objects.get(slug="weather")
    assert (server.trust_tier, server.isolation) == ("builtin", "local")
    assert "Isolation becomes local, the Builtin tier's default" in out.getvalue()
    assert "is a path on this host" not in out.getvalue()


@pytest.mark.django_db
def test_a_reimport_with_a_new_tier_keeps_the_isolation_the_file_sets(tmp_path):
    path = tmp_path / "toolroom.yaml"
    path.write_text(
        "mcp_servers:\n"
        "  weather:\n"
        "    name: Weather\n"
        "    transport: stdio\n"
        "    command: [python3, -m, weather]\n"
        "    sandbox: {isolation: sandbox}\n"
    )
    call_command("import_servers", str(path), stdout=io.StringIO())

    call_command("import_servers", str(path), "--tier", "builtin", "--update", stdout=io.StringIO())

    server = McpServer.objects.get(slug="weather")
    assert (server.trust_tier, server.isolation) == ("builtin", "sandbox")


@pytest.mark.django_db
def test_the_admin_warns_on_the_server_page_and_filters_the_list(client, alice):
    doomed = McpServerFactory(
        slug="doomed", trust_tier="untrusted", isolation="sandbox", command=["/opt/homebrew/x"]
    )
    unadopted = McpServerFactory(
        slug="unadopted", trust_tier="untrusted", isolation="sandbox", command=["npx", "-y", "x"]
    )
    McpServerFactory(
        slug="packaged",
        trust_tier="untrusted",
        isolation="sandbox",
        command=["uvx", "mcp-server-time==2026.10.19"],
        package_registry="pypi",
        package_identifier="mcp-server-time",
        package_version="2026.10.19",
    )
    McpServerFactory(slug="local", trust_tier="builtin", isolation="local", command=["/bin/x"])
    client.force_login(alice)

    page = client.get(reverse("admin:servers_mcpserver_change", args=[doomed.pk]))
    listed = client.get(
        reverse("admin:servers_mcpserver_changelist"), {"sandbox_launch": "will_fail"}
    )

    assert "Sandbox: The program &#x27;/opt/homebrew/x&#x27; is a path on this host" in (
        page.content.decode()
    )
    assert {server.slug for server in listed.context["cl"].result_list} == {
        doomed.slug,
        unadopted.slug,
    }


@pytest.mark.django_db
def test_toolroom_yaml_commands_are_read_as_launchers_too():
    content = (
        b"version: 1\nmcp_servers:\n  time:\n    name: Time\n    transport: stdio\n"
        b"    command: [uvx, 'mcp-server-time==2026.10.19', --local-timezone, UTC]\n"
    )

    plan = import_plan(content=content, filename="servers.yaml", options=ImportOptions())

    values = _entry(plan, "time").values
    assert (values["package_registry"], values["package_version"]) == ("pypi", "2026.10.19")
    assert values["command"] == ["uvx", "mcp-server-time==2026.10.19", "--local-timezone", "UTC"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["uvx", "mcp-server-time==1.0", "--tz", "UTC"], ("", ["--tz", "UTC"])),
        (["uvx", "--from", "mcp-server-time==1.0", "time-cli", "-v"], ("time-cli", ["-v"])),
        # server.json runtime options the parser refuses still run the package's arguments.
        (["uvx", "--python", "3.12", "mcp-server-time==1.0", "--tz", "UTC"], ("", ["--tz", "UTC"])),
        (["uvx", "other-package==1.0"], None),
        (["python", "-m", "mcp_server_time"], None),
    ],
)
def test_the_sandbox_finds_the_packages_own_arguments(argv, expected):
    assert package_command(argv, "mcp-server-time") == expected
