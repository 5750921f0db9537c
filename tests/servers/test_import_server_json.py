"""Importing the official MCP registry's server.json, alone or as the registry API's list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.servers.importing import (
    ImportFileError,
    ImportOptions,
    import_apply,
    import_plan,
    slug_from_name,
)
from registry.servers.models import McpServer, PackageRegistry, Transport

pytestmark = pytest.mark.django_db

DATA = Path(__file__).parent.parent / "data" / "imports"


def _plan(name=None, *, document=None, **options):
    content = json.dumps(document).encode() if document is not None else (DATA / name).read_bytes()
    return import_plan(content=content, filename=name, options=ImportOptions(**options))


def _only(plan):
    [entry] = plan.entries
    return entry


def _problems(excinfo):
    return [str(problem) for problem in excinfo.value.problems]


def test_it_slugs_the_reverse_dns_name():
    assert slug_from_name("io.github.user/weather") == "io-github-user-weather"


def test_it_runs_a_pypi_package_with_uvx_pinned_to_its_version():
    entry = _only(_plan("weather.server.json"))

    assert entry.slug == "io-github-example-weather-mcp"
    assert entry.values["transport"] == Transport.STDIO
    assert entry.values["command"] == ["uvx", "weather-mcp-server==0.5.0", "--units", "celsius"]


def test_it_records_the_package_reference():
    entry = _only(_plan("weather.server.json"))

    assert (
        entry.values["package_registry"],
        entry.values["package_identifier"],
        entry.values["package_version"],
    ) == (PackageRegistry.PYPI, "weather-mcp-server", "0.5.0")


def test_it_takes_the_title_description_and_links():
    entry = _only(_plan("weather.server.json"))

    assert entry.name == "Weather"
    assert entry.values["homepage_url"] == "https://example.github.io/weather-mcp/"
    assert entry.values["repository_url"] == "https://github.com/example/weather-mcp"
    assert entry.values["version"] == "0.5.0"


def test_it_stores_required_env_vars_without_a_value_empty_and_says_to_set_them():
    entry = _only(_plan("weather.server.json"))

    assert entry.values["env"] == {"WEATHER_API_KEY": "", "WEATHER_CACHE_SECONDS": "600"}
    assert any(
        "WEATHER_API_KEY (secret)" in warning and "Set them in the admin" in warning
        for warning in entry.warnings
    )


def test_it_runs_an_npm_package_with_npx_and_its_default_arguments():
    entry = _only(_plan("filesystem.server.json"))

    assert entry.values["command"] == [
        "npx",
        "-y",
        "@modelcontextprotocol/server-filesystem@2026.8.31",
        "/workspace",
    ]
    assert entry.values["env"] == {"LOG_LEVEL": "info"}


def test_it_chooses_the_first_usable_package_and_reports_the_skipped_ones():
    entry = _only(_plan("filesystem.server.json"))

    assert entry.values["package_registry"] == PackageRegistry.NPM
    [skipped] = [w for w in entry.warnings if w.startswith("Skipped:")]
    assert "packages[0] (registry type 'mcpb' is not supported)" in skipped
    assert "packages[2] (oci mcp/filesystem)" in skipped


def test_it_runs_an_oci_image_with_the_tag_from_the_identifier():
    entry = _only(_plan("github-oci.server.json"))

    assert entry.values["image"] == "ghcr.io/github/github-mcp-server:0.18.0"
    assert entry.values["command"] == [
        "docker",
        "run",
        "-i",
        "--rm",
        "ghcr.io/github/github-mcp-server:0.18.0",
        "stdio",
    ]
    assert (entry.values["package_identifier"], entry.values["package_version"]) == (
        "ghcr.io/github/github-mcp-server",
        "0.18.0",
    )


def test_it_leaves_docker_runtime_arguments_to_the_sandbox_policy():
    entry = _only(_plan("github-oci.server.json"))

    assert any("runtimeArguments" in w and "sandbox policy" in w for w in entry.warnings)


def test_it_prefers_a_streamable_http_remote_over_sse_and_fills_url_variables():
    entry = _only(_plan("remote.server.json"))

    assert entry.values["transport"] == Transport.STREAMABLE_HTTP
    assert entry.values["url"] == "https://eu.mcp.analytics.example.com/mcp"
    assert entry.values["headers"] == {"X-API-Key": "", "X-Client": "toolroom"}
    assert any("remotes[0] (sse" in warning for warning in entry.warnings)


def test_it_reads_the_registry_api_list_and_keeps_the_latest_version():
    plan = _plan("registry_servers.json")

    notes = next(entry for entry in plan.entries if entry.slug == "io-github-example-notes")
    assert [entry.slug for entry in plan.entries] == [
        "io-github-example-notes",
        "io-github-example-time-zones",
    ]
    assert notes.values["package_version"] == "1.1.0"
    assert any("version 1.0.0 is skipped" in warning for warning in plan.warnings)


def test_it_warns_about_a_server_the_registry_marks_deprecated():
    plan = _plan("registry_servers.json")

    zones = next(entry for entry in plan.entries if entry.slug == "io-github-example-time-zones")
    assert any("deprecated" in warning for warning in zones.warnings)


def test_it_refuses_a_server_whose_only_package_type_is_unsupported_naming_it():
    with pytest.raises(ImportFileError) as excinfo:
        _plan("nuget.server.json")

    [problem] = excinfo.value.problems
    assert problem.entry == "io.github.joelverhagen/knapcode-samplemcpserver"
    assert problem.field == "packages"
    assert "registry type 'nuget' is not supported" in problem.message


def test_it_refuses_an_unpinned_package_version():
    document = json.loads((DATA / "weather.server.json").read_text())
    document["packages"][0]["version"] = "latest"

    with pytest.raises(ImportFileError) as excinfo:
        _plan(document=document)

    assert _problems(excinfo) == [
        (
            "io.github.example/weather-mcp: packages[0].version: 'latest' is not a pinned version; "
            "give the exact version to run."
        )
    ]


def test_it_refuses_a_remote_url_template_without_defaults():
    document = {
        "name": "com.example/tenant",
        "description": "Per-tenant server",
        "version": "1.0.0",
        "remotes": [{"type": "streamable-http", "url": "https://{tenant_id}.example.com/mcp"}],
    }

    with pytest.raises(ImportFileError) as excinfo:
        _plan(document=document)

    [problem] = excinfo.value.problems
    assert (problem.entry, problem.field) == ("com.example/tenant", "remotes[0].url")
    assert "tenant_id" in problem.message


def test_it_explains_the_pre_2025_09_snake_case_format():
    document = {
        "name": "io.github.example/old",
        "description": "Old format",
        "version_detail": {"version": "1.0.0"},
        "packages": [{"registry_type": "npm", "identifier": "old", "version": "1.0.0"}],
    }

    with pytest.raises(ImportFileError) as excinfo:
        _plan(document=document)

    assert "camelCase" in excinfo.value.problems[0].message


def test_it_imports_a_server_json_as_a_draft_server():
    plan = _plan("weather.server.json")

    import_apply(plan=plan, actor="cli:test")

    server = McpServer.objects.get(slug="io-github-example-weather-mcp")
    assert server.command == ["uvx", "weather-mcp-server==0.5.0", "--units", "celsius"]
    assert server.env == {"WEATHER_API_KEY": "", "WEATHER_CACHE_SECONDS": "600"}
    assert server.review_status == "draft"
