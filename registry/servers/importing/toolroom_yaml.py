"""Toolroom's own YAML: servers as configuration in a repository, with categories and policies.

More: docs/admin.md, "Module notes".
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError

from registry.servers.importing.entries import (
    ImportProblem,
    ParsedCategory,
    ParsedEntry,
    ParsedFile,
)
from registry.servers.importing.variables import ProcessVariables, variable_refusal
from registry.servers.launch_spec import ENV_NAME
from registry.servers.models import (
    HealthCheckMethod,
    PackageRegistry,
    RestartPolicy,
    Transport,
    UpstreamAuth,
)
from registry.servers.policy import DataSensitivity, Isolation, NetworkMode, TrustTier

FORMAT = "yaml"
FILE_VERSION = 1

_TEXT = {"type": "string"}
_SECRETS = {"type": "object", "additionalProperties": {"type": ["string", "null"]}}


def _group(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties}


SERVER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["transport"],
    "properties": {
        "name": _TEXT,
        "description": _TEXT,
        "category": {"type": ["string", "null"]},
        "trust_tier": {"enum": list(TrustTier.values)},
        "version": _TEXT,
        "homepage_url": _TEXT,
        "repository_url": _TEXT,
        "transport": {"enum": list(Transport.values)},
        "command": {"type": "array", "items": _TEXT},
        "working_directory": _TEXT,
        "url": _TEXT,
        "env": _SECRETS,
        "env_not_secret": {"type": "array", "items": _TEXT},
        "headers": _SECRETS,
        "package": {
            "type": "object",
            "additionalProperties": False,
            "required": ["registry", "identifier", "version"],
            "properties": {
                "registry": {"enum": [v for v in PackageRegistry.values if v]},
                "identifier": _TEXT,
                "version": _TEXT,
            },
        },
        "image": _TEXT,
        "data_sensitivity": {"enum": list(DataSensitivity.values)},
        "upstream_auth": {"enum": list(UpstreamAuth.values)},
        "person_secret": _group({"header": _TEXT, "prefix": _TEXT}),
        "sandbox": _group(
            {
                "isolation": {"enum": list(Isolation.values)},
                "network": {"enum": list(NetworkMode.values)},
                "egress_allowlist": {"type": "array", "items": _TEXT},
                "memory_mb": {"type": ["integer", "null"]},
                "cpus": {"type": ["number", "null"]},
                "pids": {"type": ["integer", "null"]},
                "storage": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["path", "size_mb"],
                        "properties": {
                            "path": _TEXT,
                            "scope": {"enum": ["server", "team", "person", "conversation"]},
                            "size_mb": {"type": "integer"},
                        },
                    },
                },
            }
        ),
        "health_check": _group(
            {
                "method": {"enum": list(HealthCheckMethod.values)},
                "tool": _TEXT,
                "arguments": {"type": "object"},
                "interval_seconds": {"type": "integer"},
                "timeout_seconds": {"type": "integer"},
                "failure_threshold": {"type": "integer"},
            }
        ),
        "restart": _group(
            {
                "auto_start": {"type": "boolean"},
                "policy": {"enum": list(RestartPolicy.values)},
                "max_attempts": {"type": "integer"},
            }
        ),
    },
}

FILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["mcp_servers"],
    "properties": {
        "version": {"const": FILE_VERSION},
        "categories": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["slug", "name"],
                "properties": {"slug": _TEXT, "name": _TEXT, "description": _TEXT},
            },
        },
        "mcp_servers": {"type": "object", "additionalProperties": SERVER_SCHEMA},
    },
}

# YAML key path -> model field; the launch keys are reset when an entry leaves them out.
_PLAIN_KEYS = {
    "env_not_secret": "env_not_secret",
    "name": "name",
    "description": "description",
    "version": "version",
    "homepage_url": "homepage_url",
    "repository_url": "repository_url",
    "transport": "transport",
    "data_sensitivity": "data_sensitivity",
    "upstream_auth": "upstream_auth",
}
_LAUNCH_KEYS = {
    "command": ("command", list),
    "working_directory": ("working_directory", str),
    "url": ("url", str),
    "env": ("env", dict),
    "headers": ("headers", dict),
    "image": ("image", str),
}
_GROUP_KEYS = {
    ("sandbox", "isolation"): "isolation",
    ("sandbox", "network"): "network_mode",
    ("sandbox", "egress_allowlist"): "egress_allowlist",
    ("sandbox", "memory_mb"): "memory_limit_mb",
    ("sandbox", "cpus"): "cpu_limit",
    ("sandbox", "pids"): "pids_limit",
    ("sandbox", "storage"): "storage",
    ("health_check", "method"): "health_check_method",
    ("health_check", "tool"): "health_check_tool",
    ("health_check", "arguments"): "health_check_arguments",
    ("health_check", "interval_seconds"): "health_check_interval_seconds",
    ("health_check", "timeout_seconds"): "health_check_timeout_seconds",
    ("health_check", "failure_threshold"): "health_failure_threshold",
    ("restart", "auto_start"): "auto_start",
    ("restart", "policy"): "restart_policy",
    ("restart", "max_attempts"): "restart_max_attempts",
    ("person_secret", "header"): "person_secret_header",
    ("person_secret", "prefix"): "person_secret_prefix",
}
FIELD_LABELS: dict[str, str] = {
    **{field: key for key, field in _PLAIN_KEYS.items()},
    **{field: key for key, (field, _) in _LAUNCH_KEYS.items()},
    **{field: f"{group}.{key}" for (group, key), field in _GROUP_KEYS.items()},
    "package_registry": "package.registry",
    "package_identifier": "package.identifier",
    "package_version": "package.version",
}

_VALIDATOR = Draft202012Validator(FILE_SCHEMA)


class _VariableError(ValueError):
    pass


def parse(data: dict[str, Any], *, environ: Mapping[str, str]) -> ParsedFile:
    parsed = ParsedFile(format=FORMAT)
    parsed.problems.extend(_schema_problems(data))
    if parsed.problems:
        return parsed
    if "version" not in data:
        parsed.warnings.append(f"The file has no `version`; read as version {FILE_VERSION}.")
    for index, category in enumerate(data.get("categories") or []):
        label = f"categories[{index}]"
        values = _expand_all(category, environ, label, parsed.problems, "")
        parsed.categories.append(
            ParsedCategory(
                slug=values["slug"], name=values["name"], description=values.get("description", "")
            )
        )
    servers = data["mcp_servers"] or {}
    if not servers:
        parsed.warnings.append("`mcp_servers` is empty: there is nothing to import.")
    for slug, spec in servers.items():
        parsed.entries.append(_parse_server(str(slug), spec, environ))
    return parsed


def _schema_problems(data: dict[str, Any]) -> list[ImportProblem]:
    problems = []
    for error in sorted(_VALIDATOR.iter_errors(data), key=lambda e: [str(p) for p in e.path]):
        problems.extend(_describe_schema_error(error))
    return problems


def _describe_schema_error(error: SchemaError) -> list[ImportProblem]:
    path = [str(part) for part in error.absolute_path]
    if path[:1] == ["mcp_servers"] and len(path) >= 2:
        entry: str | None = path[1]
        field_path = path[2:]
    else:
        entry, field_path = None, path
    where = ".".join(field_path) or None
    schema: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
    expected: Any = error.validator_value
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return [
            ImportProblem(
                entry,
                ".".join([*field_path, str(key)]),
                f"Unknown key {key!r}; allowed here: {', '.join(allowed)}.",
            )
            for key in unknown
        ]
    if error.validator == "required":
        missing = str(error.message).split("'")[1] if "'" in str(error.message) else "a key"
        return [ImportProblem(entry, ".".join([*field_path, missing]), "This key is required.")]
    if error.validator == "const" and field_path == ["version"]:
        return [
            ImportProblem(
                None,
                "version",
                f"Toolroom YAML files are version {FILE_VERSION}; "
                f"this one says {error.instance!r}.",
            )
        ]
    if error.validator == "enum":
        choices = ", ".join(str(choice) for choice in expected)
        return [ImportProblem(entry, where, f"{error.instance!r} is not one of: {choices}.")]
    if error.validator == "type":
        if entry is not None and not field_path:
            return [ImportProblem(entry, None, "Each server is a mapping of keys to values.")]
        wanted = " or ".join(expected) if isinstance(expected, list) else str(expected)
        quote = "string" in wanted and isinstance(error.instance, int | float)
        hint = " (put the value in quotes)" if quote else ""
        return [
            ImportProblem(
                entry,
                where,
                f"Must be {_type_name(wanted)}, not "
                f"{_type_name(type(error.instance).__name__)}{hint}.",
            )
        ]
    return [ImportProblem(entry, where, error.message)]


def _type_name(name: str) -> str:
    names = {
        "string": "text",
        "str": "text",
        "object": "a mapping",
        "dict": "a mapping",
        "array": "a list",
        "list": "a list",
        "integer": "a whole number",
        "int": "a number",
        "number": "a number",
        "float": "a number",
        "boolean": "true or false",
        "bool": "true or false",
        "null": "empty",
        "NoneType": "empty",
    }
    return " or ".join(names.get(part.strip(), part.strip()) for part in name.split(" or "))


def expand_variables(text: str, environ: Mapping[str, str]) -> str:
    """Replace ${NAME} with the environment's value; `$$` is a literal `$`. A `$` followed by
    anything else is kept as it is."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "$":
            out.append(ch)
            i += 1
            continue
        following = text[i + 1 : i + 2]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "{":
            end = text.find("}", i + 2)
            if end == -1:
                raise _VariableError("has a `${` without its closing `}` (write `$$` for a $)")
            name = text[i + 2 : end]
            if not ENV_NAME.match(name):
                raise _VariableError(f"refers to ${{{name}}}, which is not a variable name")
            refusal = variable_refusal(
                name, environ.get(name), from_process=isinstance(environ, ProcessVariables)
            )
            if refusal:
                raise _VariableError(refusal)
            if name not in environ:
                raise _VariableError(f"refers to ${{{name}}}, which is not set in the environment")
            out.append(environ[name])
            i = end + 1
        else:
            out.append("$")
            i += 1
    return "".join(out)


def _expand_all(
    value: Any, environ: Mapping[str, str], entry: str, problems: list[ImportProblem], path: str
) -> Any:
    if isinstance(value, str):
        try:
            return expand_variables(value, environ)
        except _VariableError as exc:
            problems.append(ImportProblem(entry, path or None, f"The value {exc}."))
            return value
    if isinstance(value, dict):
        return {
            key: _expand_all(item, environ, entry, problems, f"{path}.{key}" if path else str(key))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            _expand_all(item, environ, entry, problems, f"{path}[{index}]")
            for index, item in enumerate(value)
        ]
    return value


def _parse_server(slug: str, raw: dict[str, Any], environ: Mapping[str, str]) -> ParsedEntry:
    entry = ParsedEntry(label=slug, slug=slug, field_labels=dict(FIELD_LABELS))
    spec = _expand_all(raw, environ, slug, entry.problems, "")
    entry.create_defaults["name"] = slug
    for key, field in _PLAIN_KEYS.items():
        if key in spec:
            entry.fields[field] = spec[key]
    for key, (field, kind) in _LAUNCH_KEYS.items():
        entry.fields[field] = spec.get(key, kind())
    package = spec.get("package") or {}
    entry.fields["package_registry"] = package.get("registry", "")
    entry.fields["package_identifier"] = package.get("identifier", "")
    entry.fields["package_version"] = package.get("version", "")
    for (group, key), field in _GROUP_KEYS.items():
        values = spec.get(group) or {}
        if key in values:
            value = values[key]
            if field == "cpu_limit" and value is not None:
                value = Decimal(str(value))
            if field == "storage":  # one shape stored: the scope said even when it is the default
                value = [{"scope": "server", **item} for item in value]
            entry.fields[field] = value
    if "trust_tier" in spec:
        entry.trust_tier = spec["trust_tier"]
    if "category" in spec:
        entry.category = spec["category"] or None
        entry.category_given = True
    return entry
