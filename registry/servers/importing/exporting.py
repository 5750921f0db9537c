"""Exporting servers as Toolroom YAML (config as code, round-trips through the importer) or as a
Claude Desktop style mcp.json.

Secrets stay out unless asked for: env and header names are kept with a null value, which the
importer reads as "keep the value already stored" (or "store empty and warn" for a new server).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import yaml
from django.utils import timezone

from registry.servers.importing.reading import FORMAT_MCP_JSON, FORMAT_YAML
from registry.servers.importing.toolroom_yaml import FILE_VERSION
from registry.servers.models import Category, McpServer, Transport, UpstreamAuth

EXPORT_FORMATS = (FORMAT_YAML, FORMAT_MCP_JSON)


def export_servers(
    format: str = FORMAT_YAML,
    include_secrets: bool = False,
    servers: Iterable[McpServer] | None = None,
) -> str:
    """The servers (all of them when `servers` is None) in `format`, ordered by slug."""
    if format not in EXPORT_FORMATS:
        raise ValueError(f"Cannot export as {format!r}; choose {' or '.join(EXPORT_FORMATS)}.")
    if servers is None:
        selected = list(McpServer.objects.select_related("category").order_by("slug"))
    else:
        selected = sorted(servers, key=lambda server: server.slug)
    if format == FORMAT_MCP_JSON:
        return _as_mcp_json(selected, include_secrets=include_secrets)
    return _as_yaml(selected, include_secrets=include_secrets, all_categories=servers is None)


def _secrets(
    values: dict[str, str], include_secrets: bool, public: frozenset[str] = frozenset()
) -> dict[str, str | None]:
    """Values left out (null: "keep the stored one") unless asked for, or marked not secret."""
    return {
        key: (value if include_secrets or key in public else None)
        for key, value in sorted(values.items())
    }


# --- Toolroom YAML -----------------------------------------------------------------------------


def _number(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


def server_as_yaml_entry(server: McpServer, *, include_secrets: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": server.name,
        "description": server.description,
        "category": server.category.slug if server.category is not None else None,
        "trust_tier": server.trust_tier,
        "version": server.version,
        "homepage_url": server.homepage_url,
        "repository_url": server.repository_url,
        "transport": server.transport,
    }
    # The launch spec: what is empty is left out, the importer resets it to empty.
    if server.command:
        entry["command"] = list(server.command)
    if server.working_directory:
        entry["working_directory"] = server.working_directory
    if server.url:
        entry["url"] = server.url
    if server.env:
        public = frozenset(server.env_not_secret or ())
        entry["env"] = _secrets(server.env, include_secrets, public)
        if public:
            entry["env_not_secret"] = sorted(public)
    if server.headers:
        entry["headers"] = _secrets(server.headers, include_secrets)
    if server.package_registry:
        entry["package"] = {
            "registry": server.package_registry,
            "identifier": server.package_identifier,
            "version": server.package_version,
        }
    if server.image:
        entry["image"] = server.image
    entry["data_sensitivity"] = server.data_sensitivity
    if server.upstream_auth != UpstreamAuth.SHARED:
        entry["upstream_auth"] = server.upstream_auth
    if server.upstream_auth == UpstreamAuth.PERSON_SECRET or (
        server.person_secret_header,
        server.person_secret_prefix,
    ) != ("Authorization", "Bearer "):
        entry["person_secret"] = {
            "header": server.person_secret_header,
            "prefix": server.person_secret_prefix,
        }
    entry["sandbox"] = {
        "isolation": server.isolation,
        "network": server.network_mode,
        "egress_allowlist": list(server.egress_allowlist),
        "memory_mb": server.memory_limit_mb,
        "cpus": _number(server.cpu_limit),
        "pids": server.pids_limit,
    }
    if server.storage:
        entry["sandbox"]["storage"] = [dict(item) for item in server.storage]
    entry["health_check"] = {
        "method": server.health_check_method,
        "tool": server.health_check_tool,
        "arguments": dict(server.health_check_arguments),
        "interval_seconds": server.health_check_interval_seconds,
        "timeout_seconds": server.health_check_timeout_seconds,
        "failure_threshold": server.health_failure_threshold,
    }
    entry["restart"] = {
        "auto_start": server.auto_start,
        "policy": server.restart_policy,
        "max_attempts": server.restart_max_attempts,
    }
    return entry


class _ExportDumper(yaml.SafeDumper):
    """Writes every mapping and list in full (never as anchors), text as plain strings."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _as_yaml(servers: list[McpServer], *, include_secrets: bool, all_categories: bool) -> str:
    if all_categories:
        categories = list(Category.objects.order_by("slug"))
    else:
        used = {server.category_id for server in servers if server.category_id}
        categories = list(Category.objects.filter(pk__in=used).order_by("slug"))
    document: dict[str, Any] = {"version": FILE_VERSION}
    if categories:
        document["categories"] = [
            {"slug": c.slug, "name": c.name, "description": c.description} for c in categories
        ]
    document["mcp_servers"] = {
        server.slug: server_as_yaml_entry(server, include_secrets=include_secrets)
        for server in servers
    }
    secrets_note = (
        "# This file CONTAINS SECRETS (env and header values): keep it private.\n"
        if include_secrets
        else "# Secrets are left out: env and header values are null, and importing null keeps\n"
        "# the value already stored (python manage.py export_servers --include-secrets\n"
        "# writes them).\n"
    )
    header = (
        f"# Toolroom MCP servers, exported {timezone.now():%Y-%m-%d %H:%M %Z}.\n"
        "# Import with: python manage.py import_servers THIS_FILE\n" + secrets_note
    )
    body = yaml.dump(
        document,
        Dumper=_ExportDumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )
    return header + body


# --- mcp.json (Claude Desktop's shape) ---------------------------------------------------------


def server_as_mcp_json_entry(server: McpServer, *, include_secrets: bool) -> dict[str, Any]:
    if server.transport == Transport.STDIO:
        entry: dict[str, Any] = {
            "command": server.command[0] if server.command else "",
            "args": list(server.command[1:]),
        }
        if server.env:
            entry["env"] = _secrets(server.env, include_secrets)
        if server.working_directory:
            entry["cwd"] = server.working_directory
        return entry
    entry = {
        "type": "http" if server.transport == Transport.STREAMABLE_HTTP else "sse",
        "url": server.url,
    }
    if server.headers:
        entry["headers"] = _secrets(server.headers, include_secrets)
    if server.upstream_auth == UpstreamAuth.PERSON_OAUTH:
        entry["oauth"] = {}  # each person signs in (mcp_json reads it back as person_oauth)
    return entry


def _as_mcp_json(servers: list[McpServer], *, include_secrets: bool) -> str:
    document = {
        "mcpServers": {
            server.slug: server_as_mcp_json_entry(server, include_secrets=include_secrets)
            for server in servers
        }
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
