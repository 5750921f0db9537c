"""Importing Toolroom's own YAML: categories, tiers, policies, ${VAR} expansion, strict keys."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from registry.servers.importing import (
    ImportAction,
    ImportFileError,
    ImportOptions,
    import_apply,
    import_plan,
)
from registry.servers.models import Category, McpServer, Transport
from registry.servers.policy import Isolation, NetworkMode, TrustTier
from tests.factories import CategoryFactory, McpServerFactory

pytestmark = pytest.mark.django_db

DATA = Path(__file__).parent.parent / "data" / "imports"
ENV = {"REPO_DIR": "/srv/platform", "TRACKER_TOKEN": "trk_9a8b7c6d5e4f3a2b1c0d"}


def _plan(text=None, *, environ=None, **options):
    content = text.encode() if text is not None else (DATA / "toolroom.yaml").read_bytes()
    return import_plan(
        content=content,
        filename="servers.yaml",
        options=ImportOptions(
            format="yaml", environ=ENV if environ is None else environ, **options
        ),
    )


def _import(text=None, **options):
    return import_apply(plan=_plan(text, **options), actor="cli:test")


def _problems(text, **options):
    with pytest.raises(ImportFileError) as excinfo:
        _plan(text, **options)
    return [(p.entry, p.field, p.message) for p in excinfo.value.problems]


def _entry(plan, slug):
    return next(entry for entry in plan.entries if entry.slug == slug)


def test_it_creates_the_categories_the_file_defines():
    _import()

    assert dict(Category.objects.values_list("slug", "name")) == {
        "developer-tools": "Developer tools",
        "web": "Web",
    }


def test_it_imports_servers_with_their_tier_category_and_policy():
    _import()

    fetch = McpServer.objects.get(slug="fetch")
    assert fetch.trust_tier == TrustTier.COMMUNITY
    assert fetch.category == Category.objects.get(slug="web")
    assert fetch.network_mode == NetworkMode.PROXIED
    assert fetch.egress_allowlist == ["en.wikipedia.org:443", "docs.python.org:443"]
    assert (fetch.memory_limit_mb, fetch.cpu_limit, fetch.pids_limit) == (512, Decimal("0.5"), 64)
    assert (fetch.package_registry, fetch.package_version) == ("pypi", "2026.10.24")


def test_it_imports_health_check_and_restart_policies():
    _import()

    git = McpServer.objects.get(slug="git")
    assert git.isolation == Isolation.LOCAL
    assert (git.health_check_interval_seconds, git.health_check_timeout_seconds) == (120, 15)
    assert (git.auto_start, git.restart_max_attempts) == (True, 5)


def test_it_expands_variables_from_the_environment():
    _import()

    git = McpServer.objects.get(slug="git")
    issues = McpServer.objects.get(slug="issues")
    assert git.command[-1] == "/srv/platform"
    assert issues.headers["Authorization"] == "Bearer trk_9a8b7c6d5e4f3a2b1c0d"


def test_it_reads_a_double_dollar_as_a_literal_dollar():
    _import()

    assert McpServer.objects.get(slug="issues").headers["X-Cost-Center"] == "platform-$42"


def test_it_names_the_variable_and_the_entry_when_a_variable_is_undefined():
    problems = _problems(None, environ={"REPO_DIR": "/srv/platform"})

    assert problems == [
        (
            "issues",
            "headers.Authorization",
            "The value refers to ${TRACKER_TOKEN}, which is not set in the environment.",
        )
    ]


def test_it_refuses_an_unterminated_variable_reference():
    text = "mcp_servers:\n  x:\n    transport: stdio\n    command: [run, '${OOPS']\n"

    [(entry, field, message)] = _problems(text)

    assert (entry, field) == ("x", "command[1]")
    assert "without its closing" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "mcp_servers:\n  time:\n    transport: stdio\n    command: [t]\n    sandbx: {}\n",
            ("time", "sandbx", "Unknown key 'sandbx'"),
        ),
        (
            (
                "mcp_servers:\n  time:\n    transport: stdio\n    command: [t]\n"
                "    sandbox: {memory: 64}\n"
            ),
            ("time", "sandbox.memory", "Unknown key 'memory'"),
        ),
        (
            "servers:\n  time: {}\nmcp_servers: {}\n",
            (None, "servers", "Unknown key 'servers'"),
        ),
    ],
    ids=["entry", "nested", "top-level"],
)
def test_it_refuses_unknown_keys_naming_the_entry_and_the_key(text, expected):
    [(entry, field, message)] = _problems(text)

    assert (entry, field) == expected[:2]
    assert message.startswith(expected[2])
    assert "allowed here:" in message


def test_it_names_the_entry_and_key_for_a_value_of_the_wrong_kind():
    text = "mcp_servers:\n  time:\n    transport: stdio\n    command: [t]\n    version: 1.10\n"

    assert _problems(text) == [
        ("time", "version", "Must be text, not a number (put the value in quotes).")
    ]


def test_it_refuses_a_transport_it_does_not_know():
    text = "mcp_servers:\n  time:\n    transport: websocket\n"

    [(entry, field, message)] = _problems(text)

    assert (entry, field) == ("time", "transport")
    assert message.startswith("'websocket' is not one of: stdio, streamable_http, sse")


def test_it_refuses_another_file_version():
    assert _problems("version: 2\nmcp_servers: {}\n") == [
        (None, "version", "Toolroom YAML files are version 1; this one says 2.")
    ]


def test_it_refuses_a_category_defined_nowhere():
    text = "mcp_servers:\n  time:\n    transport: stdio\n    command: [t]\n    category: nope\n"

    [(entry, field, message)] = _problems(text)

    assert (entry, field) == ("time", "category")
    assert "There is no category 'nope'" in message


def test_it_uses_a_category_that_already_exists():
    CategoryFactory(slug="time-and-date")
    text = (
        "mcp_servers:\n  time:\n    transport: stdio\n    command: [t]\n"
        "    category: time-and-date\n"
    )

    _import(text)

    assert McpServer.objects.get(slug="time").category == Category.objects.get(slug="time-and-date")


def test_it_updates_a_category_whose_name_changed():
    CategoryFactory(slug="web", name="Internet")

    plan = _plan()

    [web] = [c for c in plan.categories if c.slug == "web"]
    assert web.action == ImportAction.UPDATE


def test_it_gives_an_untrusted_tier_when_the_importer_may_not_vouch():
    plan = _plan(may_vouch_tier=False)

    git = _entry(plan, "git")
    assert git.values["trust_tier"] == TrustTier.UNTRUSTED
    assert any("you may not vouch for trust tiers" in warning for warning in git.warnings)


def test_it_keeps_a_stored_tier_when_the_importer_may_not_raise_it():
    McpServerFactory(slug="git", trust_tier=TrustTier.COMMUNITY, isolation=Isolation.SANDBOX)

    plan = _plan(may_vouch_tier=False)

    assert "trust_tier" not in _entry(plan, "git").changed_fields


def test_it_refuses_a_tier_option_from_an_importer_who_may_not_vouch():
    problems = _problems(None, tier=TrustTier.BUILTIN, may_vouch_tier=False)

    assert [(entry, field) for entry, field, _ in problems] == [(None, "tier")]


def test_it_tightens_isolation_when_a_reimport_lowers_the_tier():
    _import()
    text = (
        (DATA / "toolroom.yaml")
        .read_text()
        .replace("trust_tier: builtin", "trust_tier: community")
        .replace("      isolation: local\n", "")
    )

    plan = _plan(text)

    git = _entry(plan, "git")
    assert git.values["isolation"] == Isolation.SANDBOX
    assert any("Isolation becomes sandbox" in warning for warning in git.warnings)


def test_it_leaves_keys_the_entry_does_not_give_as_they_are_on_update():
    _import()
    McpServer.objects.filter(slug="git").update(description="Edited in the admin")
    text = (
        "mcp_servers:\n  git:\n    transport: stdio\n"
        "    command: ['/opt/toolroom/venv/bin/python', -m, mcp_server_git, --repository, "
        "/srv/platform]\n    env: {GIT_AUTHOR_NAME: Toolroom}\n"
    )

    plan = _plan(text)

    assert _entry(plan, "git").action == ImportAction.UNCHANGED


def test_it_resets_launch_keys_the_entry_leaves_out():
    McpServerFactory(slug="fetch", image="mcp/fetch:1.0", trust_tier=TrustTier.COMMUNITY)
    text = "mcp_servers:\n  fetch:\n    transport: stdio\n    command: [uvx, mcp-server-fetch]\n"

    plan = _plan(text)

    assert _entry(plan, "fetch").values["image"] == ""
    assert "image" in _entry(plan, "fetch").changed_fields


def test_it_keeps_the_stored_secret_for_a_null_value():
    McpServerFactory(
        slug="issues",
        transport=Transport.STREAMABLE_HTTP,
        command=[],
        url="https://mcp.tracker.example.com/mcp",
        headers={"Authorization": "Bearer stored"},
    )
    text = (
        "mcp_servers:\n  issues:\n    transport: streamable_http\n"
        "    url: https://mcp.tracker.example.com/mcp\n    headers: {Authorization: null}\n"
    )

    plan = _plan(text)

    assert _entry(plan, "issues").values["headers"] == {"Authorization": "Bearer stored"}
    assert _entry(plan, "issues").action == ImportAction.UNCHANGED


def test_it_stores_a_null_secret_of_a_new_server_empty_with_a_warning():
    text = (
        "mcp_servers:\n  memory:\n    transport: stdio\n    command: [npx, x]\n"
        "    env: {MEMORY_TOKEN: null}\n"
    )

    entry = _entry(_plan(text), "memory")

    assert entry.values["env"] == {"MEMORY_TOKEN": ""}
    assert any("MEMORY_TOKEN has no value" in warning for warning in entry.warnings)


def test_it_refuses_yaml_anchors_and_aliases():
    bomb = (
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "mcp_servers: {}\n"
    )

    [(_, _, message)] = _problems(bomb)

    assert message.startswith("YAML anchors and aliases (&name, *name) are not accepted")
    assert "line 1" in message


def test_it_refuses_a_key_given_twice():
    text = "mcp_servers:\n  time:\n    transport: stdio\n  time:\n    transport: sse\n"

    [(_, _, message)] = _problems(text)

    assert "the key 'time' appears twice" in message
    assert "line 4" in message


def test_it_refuses_python_specific_yaml_tags():
    text = "mcp_servers: !!python/object/apply:os.system ['true']\n"

    [(_, _, message)] = _problems(text)

    assert message.startswith("The file is not valid YAML")


def test_it_imports_and_exports_a_server_that_acts_for_each_person():
    from registry.servers.importing.exporting import export_servers
    from registry.servers.models import UpstreamAuth

    _import(
        "version: 1\nmcp_servers:\n  tracker:\n    transport: streamable_http\n"
        "    url: https://tracker.example.com/mcp\n    upstream_auth: person_oauth\n"
    )

    assert McpServer.objects.get(slug="tracker").upstream_auth == UpstreamAuth.PERSON_OAUTH
    assert "upstream_auth: person_oauth" in export_servers()


def test_it_imports_and_exports_a_server_that_takes_each_persons_secret():
    from registry.servers.importing.exporting import export_servers
    from registry.servers.models import UpstreamAuth

    _import(
        "version: 1\nmcp_servers:\n  keyed:\n    transport: streamable_http\n"
        "    url: https://api.keyed.example.com/mcp\n    upstream_auth: person_secret\n"
        "    person_secret: {header: X-Api-Key, prefix: ''}\n"
    )

    server = McpServer.objects.get(slug="keyed")
    assert server.upstream_auth == UpstreamAuth.PERSON_SECRET
    assert (server.person_secret_header, server.person_secret_prefix) == ("X-Api-Key", "")
    import yaml

    exported = yaml.safe_load(export_servers())["mcp_servers"]["keyed"]
    assert exported["upstream_auth"] == "person_secret"
    assert exported["person_secret"] == {"header": "X-Api-Key", "prefix": ""}
