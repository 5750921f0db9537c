"""Reading the mcp.json files MCP clients write: Claude Desktop and Claude Code (`mcpServers`),
VS Code (`servers`, `inputs`), Cursor, Windsurf and Cline (`mcpServers`, with their own extras).

The file says how each server is launched or reached, never how much it is trusted: tier and
category come from the import options. Keys that other clients add (`disabled`, `autoApprove`,
`timeout`, ...) are accepted and reported; variable references such as `${API_KEY}`,
`${env:API_KEY}` or `${input:token}` are kept literally, with a warning, because only Toolroom's
own YAML expands variables.
"""

from __future__ import annotations

import re
from typing import Any

from registry.servers.importing.entries import (
    ImportProblem,
    ParsedEntry,
    ParsedFile,
    slug_from_name,
)
from registry.servers.importing.upstream_client import upstream_callback_url
from registry.servers.models import Transport, UpstreamAuth

FORMAT = "mcp-json"

VARIABLE_REFERENCE = re.compile(r"\$\{[^}]*\}")

_TYPES = {
    "stdio": Transport.STDIO,
    "http": Transport.STREAMABLE_HTTP,
    "streamable-http": Transport.STREAMABLE_HTTP,
    "streamable_http": Transport.STREAMABLE_HTTP,
    "streamablehttp": Transport.STREAMABLE_HTTP,
    "sse": Transport.SSE,
}

# Keys other clients write, and why Toolroom does not use them.
_IGNORED_KEYS = {
    "disabled": "Toolroom imports every server as a draft; it is enabled by approving it",
    "autoApprove": "Toolroom approves each tool itself, pinned to its definition",
    "alwaysAllow": "Toolroom approves each tool itself, pinned to its definition",
    "disabledTools": "tools are approved or left unapproved in Toolroom",
    "timeout": "Toolroom's health check and gateway set their own timeouts",
    "envFile": "Toolroom does not read files from the importing machine; put the variables "
    "in `env` or set them in the admin",
    "headersHelper": "Toolroom does not run helper commands; set the headers instead",
    "dev": "VS Code's development mode does not apply to a registry",
    "gallery": "VS Code's gallery link does not apply to a registry",
    "transportType": "the `type` key or the presence of `url` decides the transport",
    "networkTimeout": "Toolroom's health check and gateway set their own timeouts",
    "trust": "trust tiers are set with the import's tier option",
    "includeTools": "tools are approved or left unapproved in Toolroom",
    "excludeTools": "tools are approved or left unapproved in Toolroom",
}
_STDIO_KEYS = {"command", "args", "env", "cwd"}
_HTTP_KEYS = {"url", "serverUrl", "headers", "oauth"}
_SHARED_KEYS = {"type", "description"}
_TOP_LEVEL_IGNORED = {
    "inputs": "VS Code asks for `${input:...}` values when it starts a server; Toolroom keeps "
    "such references literally, so set the real values in the admin",
    "$schema": None,
}

_FIELD_LABELS = {
    "command": "command",
    "env": "env",
    "url": "url",
    "headers": "headers",
    "working_directory": "cwd",
    "transport": "type",
    "upstream_auth": "oauth",
}


def parse(data: dict[str, Any]) -> ParsedFile:
    parsed = ParsedFile(format=FORMAT)
    sections = [key for key in ("mcpServers", "servers") if key in data]
    if not sections:
        parsed.problems.append(
            ImportProblem(
                None,
                None,
                "This is not an mcp.json file: it has neither a `mcpServers` object (Claude, "
                "Cursor) nor a `servers` object (VS Code).",
            )
        )
        return parsed
    for key in data:
        if key in sections:
            continue
        if key in _TOP_LEVEL_IGNORED:
            reason = _TOP_LEVEL_IGNORED[key]
            if reason:
                parsed.warnings.append(f"`{key}` is accepted but not used: {reason}.")
        else:
            parsed.warnings.append(f"The top-level key `{key}` is not part of mcp.json; ignored.")
    for section in sections:
        servers = data[section]
        if not isinstance(servers, dict):
            parsed.problems.append(
                ImportProblem(
                    None, section, f"`{section}` must be an object mapping server names to servers."
                )
            )
            continue
        for name, spec in servers.items():
            parsed.entries.append(_parse_server(str(name), spec))
    return parsed


def _parse_server(name: str, spec: Any) -> ParsedEntry:
    entry = ParsedEntry(label=name, slug=slug_from_name(name), field_labels=dict(_FIELD_LABELS))
    entry.create_defaults["name"] = name[:200]
    if not entry.slug:
        entry.problem("name", "The server name gives an empty slug; use letters or digits.")
    if not isinstance(spec, dict):
        entry.problem(None, "Each server must be an object (with `command` or `url`).")
        return entry

    transport = _transport(entry, spec)
    if transport is None:
        return entry
    entry.fields["transport"] = transport
    if "description" in spec:
        if isinstance(spec["description"], str):
            entry.fields["description"] = spec["description"]
        else:
            entry.problem("description", "The description must be text.")

    if transport == Transport.STDIO:
        _parse_stdio(entry, spec)
        unused = _HTTP_KEYS
    else:
        _parse_http(entry, spec)
        unused = _STDIO_KEYS
    for key in spec:
        if key in _IGNORED_KEYS:
            disabled = key == "disabled" and spec[key]
            detail = " (it is disabled in the source file)" if disabled else ""
            entry.warnings.append(
                f"`{key}` is accepted but not used{detail}: {_IGNORED_KEYS[key]}."
            )
        elif key in unused:
            kind = "a stdio" if transport == Transport.STDIO else "an HTTP"
            entry.warnings.append(f"`{key}` does not apply to {kind} server; ignored.")
        elif key not in _STDIO_KEYS | _HTTP_KEYS | _SHARED_KEYS:
            entry.warnings.append(f"Unknown key `{key}`; ignored.")
    if spec.get("type") == "stdio":
        entry.warnings.append("`type: stdio` is accepted: stdio is what `command` implies.")
    return entry


def _transport(entry: ParsedEntry, spec: dict[str, Any]) -> str | None:
    declared = spec.get("type")
    if declared is not None:
        transport = _TYPES.get(str(declared).lower()) if isinstance(declared, str) else None
        if transport is None:
            entry.problem(
                "type",
                f"Unknown server type {declared!r}; use stdio, http (Streamable HTTP) or sse.",
            )
        return transport
    if "command" in spec:
        return Transport.STDIO
    url = spec.get("url", spec.get("serverUrl"))
    if url is not None:
        if isinstance(url, str) and url.rstrip("/").endswith("/sse"):
            entry.warnings.append(
                "No `type` is given; the URL ends in /sse, so it is imported as a legacy SSE "
                "server. Change the transport if it speaks Streamable HTTP."
            )
            return Transport.SSE
        entry.warnings.append(
            "No `type` is given; the server is imported as Streamable HTTP (what current "
            "clients try first). Change the transport if it only speaks legacy SSE."
        )
        return Transport.STREAMABLE_HTTP
    entry.problem("command", "The server has neither a `command` (stdio) nor a `url` (HTTP).")
    return None


def _parse_stdio(entry: ParsedEntry, spec: dict[str, Any]) -> None:
    command = spec.get("command")
    args = spec.get("args", [])
    if command is None:
        entry.problem("command", "A stdio server needs a `command`: the program to run.")
        return
    if not isinstance(command, str):
        entry.problem(
            "command", "`command` must be text: the program to run (arguments go in `args`)."
        )
        return
    if not isinstance(args, list):
        entry.problem("args", "`args` must be a list of arguments.")
        return
    argv = [command]
    for index, arg in enumerate(args):
        if isinstance(arg, bool) or not isinstance(arg, str | int | float):
            entry.problem(f"args[{index}]", "Each argument must be text.")
            return
        argv.append(str(arg))
    entry.fields["command"] = argv
    _warn_references(entry, "command", argv)
    if "cwd" in spec:
        if isinstance(spec["cwd"], str):
            entry.fields["working_directory"] = spec["cwd"]
        else:
            entry.problem("cwd", "`cwd` must be text: a directory.")
    else:
        entry.fields["working_directory"] = ""
    entry.fields["env"] = _mapping(entry, spec, "env")
    entry.fields["url"] = ""
    entry.fields["headers"] = {}


def _parse_http(entry: ParsedEntry, spec: dict[str, Any]) -> None:
    key = "url" if "url" in spec else "serverUrl"
    url = spec.get(key)
    if not isinstance(url, str) or not url:
        entry.problem(key, "An HTTP server needs its endpoint `url`.")
        return
    if key == "serverUrl":
        entry.field_labels["url"] = "serverUrl"
    entry.fields["url"] = url
    _warn_references(entry, key, [url])
    entry.fields["headers"] = _mapping(entry, spec, "headers")
    if "oauth" in spec:
        _parse_oauth(entry, spec["oauth"])
    entry.fields["command"] = []
    entry.fields["working_directory"] = ""
    entry.fields["env"] = {}


def _parse_oauth(entry: ParsedEntry, oauth: Any) -> None:
    """Claude Code's and VS Code's `oauth` object: the client signs each person in with OAuth.
    Toolroom does the same for every person who calls it (each person's OAuth)."""
    if oauth is False or oauth is None:
        return
    entry.fields["upstream_auth"] = UpstreamAuth.PERSON_OAUTH
    note = (
        "`oauth`: the server signs each person in with OAuth, so it is imported as a per-person "
        "server (each person's OAuth): people link their accounts under Connected accounts, and "
        "an admin links one to discover its tools"
    )
    client_id = (oauth.get("clientId") or oauth.get("client_id")) if isinstance(oauth, dict) else ""
    if isinstance(oauth, dict) and client_id:
        secret = oauth.get("clientSecret") or oauth.get("client_secret") or ""
        scopes = oauth.get("scopes") or ""
        if not all(isinstance(value, str) for value in (client_id, secret, scopes)):
            entry.problem("oauth", "`clientId`, `clientSecret` and `scopes` must be text.")
            return
        entry.upstream_client = {"client_id": client_id, "client_secret": secret, "scopes": scopes}
        note += (
            "; its `clientId` becomes the server's upstream OAuth client (the admin's, so Toolroom "
            "registers none of its own): that client must allow Toolroom's callback "
            f"{upstream_callback_url()} as a redirect URI (a client made for a desktop's "
            "`callbackPort` allows only http://localhost:PORT/callback)"
        )
    entry.warnings.append(note + ".")


def _mapping(entry: ParsedEntry, spec: dict[str, Any], key: str) -> dict[str, str | None]:
    raw = spec.get(key, {})
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        entry.problem(key, f"`{key}` must be an object of names to values.")
        return {}
    values: dict[str, str | None] = {}
    for name, value in raw.items():
        if value is None:
            # Toolroom's own exports write null for a secret left out: keep what is stored.
            values[name] = None
        elif isinstance(value, bool):
            values[name] = "true" if value else "false"
        elif isinstance(value, int | float):
            values[name] = str(value)
        elif isinstance(value, str):
            values[name] = value
            if VARIABLE_REFERENCE.search(value):
                entry.warnings.append(
                    f"{key}.{name} holds a variable reference such as ${{...}}; it is kept "
                    "literally (only Toolroom YAML expands variables). Set the real value in "
                    "the admin."
                )
        else:
            entry.problem(f"{key}.{name}", "The value must be text.")
    return values


def _warn_references(entry: ParsedEntry, field: str, values: list[str]) -> None:
    found = sorted({ref for value in values for ref in VARIABLE_REFERENCE.findall(value)})
    if found:
        entry.warnings.append(
            f"`{field}` refers to {', '.join(found)}; kept literally (only Toolroom YAML expands "
            "variables). Replace it with the real value in the admin before approving."
        )
