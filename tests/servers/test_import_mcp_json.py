"""Importing the mcp.json files that Claude Desktop and Code, VS Code, Cursor and Cline write."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.servers.importing import (
    ImportAction,
    ImportOptions,
    import_apply,
    import_plan,
)
from registry.servers.models import McpServer, ReviewStatus, Transport
from registry.servers.policy import TrustTier
from tests.factories import CategoryFactory

pytestmark = pytest.mark.django_db

DATA = Path(__file__).parent.parent / "data" / "imports"


def _plan(name, **options):
    return import_plan(
        content=(DATA / name).read_bytes(), filename=name, options=ImportOptions(**options)
    )


def _entry(plan, slug):
    return next(entry for entry in plan.entries if entry.slug == slug)


def _import(name, **options):
    plan = _plan(name, **options)
    return import_apply(plan=plan, actor="cli:test")


def test_it_reads_claude_desktop_stdio_servers_with_their_argv_and_env():
    _import("claude_desktop_config.json")

    github = McpServer.objects.get(slug="github")
    assert github.transport == Transport.STDIO
    assert github.command == [
        "docker",
        "run",
        "-i",
        "--rm",
        "-e",
        "GITHUB_PERSONAL_ACCESS_TOKEN",
        "ghcr.io/github/github-mcp-server",
    ]
    assert github.env == {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_Zq8WkLmN4pRtY7vB2cX9dF6gH1jK3sA5eU0i"
    }
    assert sorted(McpServer.objects.values_list("slug", flat=True)) == [
        "filesystem",
        "github",
        "sqlite",
    ]


def test_it_imports_new_servers_as_untrusted_drafts():
    _import("claude_desktop_config.json")

    server = McpServer.objects.get(slug="sqlite")
    assert server.review_status == ReviewStatus.DRAFT
    assert server.trust_tier == TrustTier.UNTRUSTED
    assert server.name == "sqlite"


def test_it_reads_claude_code_http_and_sse_servers():
    _import("claude_code.mcp.json")

    sentry = McpServer.objects.get(slug="sentry")
    linear = McpServer.objects.get(slug="linear")
    assert (sentry.transport, sentry.url) == (
        Transport.STREAMABLE_HTTP,
        "https://mcp.sentry.dev/mcp",
    )
    assert (linear.transport, linear.url) == (Transport.SSE, "https://mcp.linear.app/sse")
    assert sentry.command == []


def test_it_accepts_claude_codes_type_stdio_and_reports_it():
    plan = _plan("claude_code.mcp.json")

    postgres = _entry(plan, "postgres")
    assert postgres.values["transport"] == Transport.STDIO
    assert any("type: stdio" in warning for warning in postgres.warnings)


def test_it_keeps_variable_references_literally_with_a_warning():
    plan = _plan("claude_code.mcp.json")

    api = _entry(plan, "internal-api")
    postgres = _entry(plan, "postgres")
    assert api.values["headers"] == {"Authorization": "Bearer ${API_KEY}"}
    assert any("headers.Authorization" in w and "kept literally" in w for w in api.warnings)
    assert postgres.values["command"][-1] == "${DATABASE_URL}"
    assert any("${DATABASE_URL}" in w for w in postgres.warnings)


def test_it_reads_vscode_servers_with_comments_and_trailing_commas():
    plan = _plan("vscode_mcp.json")

    assert [entry.slug for entry in plan.entries] == ["perplexity", "github", "fetch"]
    assert _entry(plan, "github").values["transport"] == Transport.STREAMABLE_HTTP
    fetch = _entry(plan, "fetch")
    # `uvx mcp-server-fetch` names no version: it is pinned to what PyPI serves as the newest.
    assert fetch.values["package_identifier"] == "mcp-server-fetch"
    assert fetch.values["command"] == [
        "uvx",
        f"mcp-server-fetch=={fetch.values['package_version']}",
    ]


def test_it_reports_vscode_inputs_and_env_file_without_failing():
    plan = _plan("vscode_mcp.json")

    assert any("`inputs`" in warning for warning in plan.warnings)
    assert any("envFile" in warning for warning in _entry(plan, "fetch").warnings)
    perplexity = _entry(plan, "perplexity")
    assert any("PERPLEXITY_API_KEY" in w and "kept literally" in w for w in perplexity.warnings)


def test_it_names_a_new_server_after_the_key_and_slugs_it():
    plan = _plan("vscode_mcp.json")

    perplexity = _entry(plan, "perplexity")
    assert perplexity.name == "Perplexity"


def test_it_reads_cursor_url_servers_without_a_type_as_streamable_http():
    plan = _plan("cursor_mcp.json")

    context7 = _entry(plan, "context7")
    assert context7.values["transport"] == Transport.STREAMABLE_HTTP
    assert any("No `type` is given" in warning for warning in context7.warnings)


def test_it_reads_a_cursor_url_ending_in_sse_as_legacy_sse():
    plan = _plan("cursor_mcp.json")

    assert _entry(plan, "legacy-events").values["transport"] == Transport.SSE


@pytest.mark.parametrize("key", ["disabled", "autoApprove", "alwaysAllow", "timeout"])
def test_it_accepts_and_reports_keys_other_clients_add(key):
    plan = _plan("cline_mcp_settings.json")

    warnings = [w for entry in plan.entries for w in entry.warnings]
    assert any(f"`{key}`" in warning for warning in warnings)


def test_it_says_when_the_source_client_had_a_server_disabled():
    plan = _plan("cline_mcp_settings.json")

    assert any("disabled in the source file" in w for w in _entry(plan, "puppeteer").warnings)


def test_it_gives_every_entry_the_tier_the_importer_vouches_for():
    _import("claude_desktop_config.json", tier=TrustTier.BUILTIN)

    assert set(McpServer.objects.values_list("trust_tier", flat=True)) == {TrustTier.BUILTIN}


def test_it_puts_every_entry_in_the_category_given_as_an_option():
    CategoryFactory(slug="files", name="Files")

    _import("claude_desktop_config.json", category="files")

    assert set(McpServer.objects.values_list("category__slug", flat=True)) == {"files"}


def test_it_updates_a_server_on_reimport_instead_of_duplicating_it():
    _import("claude_desktop_config.json")
    changed = (
        (DATA / "claude_desktop_config.json")
        .read_text()
        .replace("/Users/dana/test.db", "/Users/dana/prod.db")
    )

    plan = import_plan(content=changed.encode(), filename="c.json", options=ImportOptions())
    import_apply(plan=plan, actor="cli:test")

    assert McpServer.objects.filter(slug="sqlite").count() == 1
    assert McpServer.objects.get(slug="sqlite").command[-1] == "/Users/dana/prod.db"
    assert _entry(plan, "sqlite").action == ImportAction.UPDATE
    assert _entry(plan, "github").action == ImportAction.UNCHANGED


def test_it_leaves_the_tier_and_category_that_mcp_json_cannot_express_on_update():
    _import("claude_desktop_config.json", tier=TrustTier.BUILTIN)
    category = CategoryFactory(slug="files")
    McpServer.objects.filter(slug="filesystem").update(category=category)

    _import("claude_desktop_config.json")

    server = McpServer.objects.get(slug="filesystem")
    assert server.trust_tier == TrustTier.BUILTIN
    assert server.category == category


def test_it_keeps_an_admins_name_for_the_server_on_reimport():
    _import("claude_desktop_config.json")
    McpServer.objects.filter(slug="github").update(name="GitHub (official)")

    plan = _plan("claude_desktop_config.json")

    assert _entry(plan, "github").action == ImportAction.UNCHANGED
