"""Reading the official MCP registry's server.json (schemas 2025-09-29 to 2025-12-11), alone or as
the registry API's list (`{"servers": [{"server": {...}, "_meta": {...}}], "metadata": {...}}`).

More: docs/admin.md, "Module notes"."""

from __future__ import annotations

import re
from typing import Any

from registry.servers.importing.entries import (
    ImportProblem,
    ParsedEntry,
    ParsedFile,
    slug_from_name,
)
from registry.servers.models import PackageRegistry, Transport

FORMAT = "server-json"

KNOWN_SCHEMAS = ("2025-09-29", "2025-10-11", "2025-10-17", "2025-12-11")
_OFFICIAL_META = "io.modelcontextprotocol.registry/official"
_SUPPORTED_REGISTRIES = {"pypi", "npm", "oci"}
_REMOTE_TYPES = {"streamable-http": Transport.STREAMABLE_HTTP, "sse": Transport.SSE}
_SNAKE_CASE_KEYS = {
    "registry_type",
    "environment_variables",
    "package_arguments",
    "runtime_arguments",
    "version_detail",
    "transport_type",
    "is_required",
}
_TEMPLATE = re.compile(r"\{([A-Za-z0-9_.-]+)\}")

_FIELD_LABELS = {
    "name": "name",
    "description": "description",
    "version": "version",
    "homepage_url": "websiteUrl",
    "repository_url": "repository.url",
}


def parse(data: dict[str, Any]) -> ParsedFile:
    parsed = ParsedFile(format=FORMAT)
    if isinstance(data.get("servers"), list):
        for position, server, meta in _latest_versions(data["servers"], parsed):
            parsed.entries.append(_parse_server(server, meta, f"servers[{position}]"))
        if not data["servers"]:
            parsed.warnings.append("The registry list holds no servers.")
    elif "name" in data:
        parsed.entries.append(_parse_server(data, data.get("_meta"), "server.json"))
    else:
        parsed.problems.append(
            ImportProblem(
                None,
                None,
                "This is not a server.json: it has no `name` (a single server) and no "
                "`servers` list (a registry API response).",
            )
        )
    return parsed


def _latest_versions(items: list[Any], parsed: ParsedFile) -> list[tuple[int, Any, Any]]:
    """One item per server name: the one the registry marks as latest, else the first listed.

    The registry's list endpoint returns every published version unless asked for the latest
    only; importing each as its own server would be wrong, so the others are reported.
    """
    chosen: dict[str, tuple[int, Any, Any, bool]] = {}
    order: list[str] = []
    unnamed: list[tuple[int, Any, Any]] = []
    for position, item in enumerate(items):
        server = item.get("server", item) if isinstance(item, dict) else item
        meta = item.get("_meta") if isinstance(item, dict) and "server" in item else None
        name = server.get("name") if isinstance(server, dict) else None
        if not isinstance(name, str):
            unnamed.append((position, server, meta))
            continue
        official = (meta or {}).get(_OFFICIAL_META, {}) if isinstance(meta, dict) else {}
        is_latest = bool(isinstance(official, dict) and official.get("isLatest"))
        if name not in chosen:
            chosen[name] = (position, server, meta, is_latest)
            order.append(name)
            continue
        kept = chosen[name]
        skipped_version = server.get("version")
        if is_latest and not kept[3]:
            skipped_version = kept[1].get("version") if isinstance(kept[1], dict) else None
            chosen[name] = (position, server, meta, is_latest)
        parsed.warnings.append(
            f"{name}: the list holds several versions; version {skipped_version} is skipped in "
            "favour of the one marked latest (or listed first)."
        )
    result = [(p, s, m) for p, s, m, _ in (chosen[name] for name in order)]
    return sorted(result + unnamed, key=lambda item: item[0])


def _parse_server(server: Any, meta: Any, fallback_label: str) -> ParsedEntry:
    name = server.get("name") if isinstance(server, dict) else None
    label = name if isinstance(name, str) and name else fallback_label
    entry = ParsedEntry(
        label=label, slug=slug_from_name(label) if name else "", field_labels=dict(_FIELD_LABELS)
    )
    if not isinstance(server, dict):
        entry.problem(None, "Each server must be an object.")
        return entry
    if not isinstance(name, str) or not name:
        entry.problem("name", "A server.json needs a `name` such as io.github.user/weather.")
        return entry
    if not entry.slug:
        entry.problem("name", "The name gives an empty slug; use letters or digits.")
    snake = sorted(_SNAKE_CASE_KEYS & _all_keys(server))
    if snake:
        entry.problem(
            None,
            f"This server.json uses the snake_case keys of schema 2025-07-09 ({', '.join(snake)}); "
            "since 2025-09-16 the keys are camelCase (registryType, environmentVariables, ...). "
            "Update the file to a current schema.",
        )
        return entry
    _check_schema(entry, server.get("$schema"))
    _check_status(entry, server, meta)

    title = server.get("title")
    entry.fields["name"] = (title if isinstance(title, str) and title else name)[:200]
    for key, field in (
        ("description", "description"),
        ("version", "version"),
        ("websiteUrl", "homepage_url"),
    ):
        value = server.get(key)
        if value is not None:
            if isinstance(value, str):
                entry.fields[field] = value
            else:
                entry.problem(key, f"`{key}` must be text.")
    repository = server.get("repository")
    if isinstance(repository, dict) and isinstance(repository.get("url"), str):
        entry.fields["repository_url"] = repository["url"]

    packages = server.get("packages") or []
    remotes = server.get("remotes") or []
    if not isinstance(packages, list) or not isinstance(remotes, list):
        entry.problem("packages", "`packages` and `remotes` must be lists.")
        return entry
    if not packages and not remotes:
        entry.problem(
            "packages",
            "The server has neither packages nor remotes: there is nothing to run or connect to.",
        )
        return entry
    _choose_launch(entry, packages, remotes)
    return entry


def _all_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        keys = set(value)
        for item in value.values():
            keys |= _all_keys(item)
        return keys
    if isinstance(value, list):
        return set().union(*(_all_keys(item) for item in value)) if value else set()
    return set()


def _check_schema(entry: ParsedEntry, schema: Any) -> None:
    if isinstance(schema, str) and schema and not any(v in schema for v in KNOWN_SCHEMAS):
        entry.warnings.append(
            f"The file declares schema {schema}; Toolroom reads schemas "
            f"{KNOWN_SCHEMAS[0]} to {KNOWN_SCHEMAS[-1]}. Check the result."
        )


def _check_status(entry: ParsedEntry, server: dict[str, Any], meta: Any) -> None:
    official = meta.get(_OFFICIAL_META) if isinstance(meta, dict) else None
    status = (official or {}).get("status") if isinstance(official, dict) else None
    status = status or server.get("status")
    if status in ("deprecated", "deleted"):
        entry.warnings.append(
            f"The registry marks this server as {status}; look for its replacement before "
            "approving it."
        )


def _choose_launch(entry: ParsedEntry, packages: list[Any], remotes: list[Any]) -> None:
    skipped: list[str] = []
    chosen = False
    for index, package in enumerate(packages):
        where = f"packages[{index}]"
        reason = _package_unusable(package)
        if reason:
            skipped.append(f"{where} ({reason})")
            continue
        if chosen:
            skipped.append(f"{where} ({package['registryType']} {package['identifier']})")
            continue
        chosen = _apply_package(entry, package, where)
    ranked_remotes = sorted(
        enumerate(remotes),
        key=lambda item: (
            0 if isinstance(item[1], dict) and item[1].get("type") == "streamable-http" else 1,
            item[0],
        ),
    )
    for index, remote in ranked_remotes:
        where = f"remotes[{index}]"
        if not isinstance(remote, dict) or remote.get("type") not in _REMOTE_TYPES:
            kind = remote.get("type") if isinstance(remote, dict) else None
            skipped.append(f"{where} (unsupported type {kind!r})")
            continue
        if chosen:
            skipped.append(f"{where} ({remote.get('type')} {remote.get('url')})")
            continue
        chosen = _apply_remote(entry, remote, where)
    if not chosen:
        if not entry.problems:
            entry.problem(
                "packages",
                "None of the packages or remotes can be used: "
                + "; ".join(skipped)
                + ". Toolroom runs pypi, npm and oci packages over stdio, and reaches "
                "streamable-http and sse remotes.",
            )
        return
    if skipped:
        entry.warnings.append("Skipped: " + "; ".join(skipped) + ".")


def _package_unusable(package: Any) -> str | None:
    if not isinstance(package, dict):
        return "not an object"
    registry = package.get("registryType")
    if registry not in _SUPPORTED_REGISTRIES:
        return f"registry type {registry!r} is not supported"
    if not isinstance(package.get("identifier"), str) or not package["identifier"]:
        return "no identifier"
    transport = package.get("transport") or {"type": "stdio"}
    if not isinstance(transport, dict) or transport.get("type") != "stdio":
        kind = transport.get("type") if isinstance(transport, dict) else transport
        return f"a package serving {kind!r} must be started and reached by URL, not supported"
    return None


def _apply_package(entry: ParsedEntry, package: dict[str, Any], where: str) -> bool:
    registry = package["registryType"]
    identifier: str = package["identifier"]
    version = package.get("version")
    if version is not None and not isinstance(version, str):
        entry.problem(f"{where}.version", "The version must be text.")
        return False
    entry.field_labels.update(
        {
            "command": where,
            "env": f"{where}.environmentVariables",
            "package_version": f"{where}.version",
            "package_identifier": f"{where}.identifier",
            "image": f"{where}.identifier",
        }
    )
    image = ""
    if registry == PackageRegistry.OCI:
        identifier, version, image = _oci_reference(identifier, version)
    if not version:
        entry.problem(
            f"{where}.version",
            f"The {registry} package {identifier} has no version; Toolroom runs pinned versions "
            "only.",
        )
        return False
    if version == "latest" or re.search(r"[\^~<>=*]|\.x\b", version):
        entry.problem(
            f"{where}.version",
            f"{version!r} is not a pinned version; give the exact version to run.",
        )
        return False

    runtime_args = _arguments(entry, package.get("runtimeArguments"), f"{where}.runtimeArguments")
    package_args = _arguments(entry, package.get("packageArguments"), f"{where}.packageArguments")
    hint = package.get("runtimeHint")
    if registry == PackageRegistry.PYPI:
        _warn_hint(entry, hint, "uvx", where)
        argv = ["uvx", *runtime_args, f"{identifier}=={version}", *package_args]
    elif registry == PackageRegistry.NPM:
        _warn_hint(entry, hint, "npx", where)
        argv = ["npx", "-y", *runtime_args, f"{identifier}@{version}", *package_args]
    else:
        if runtime_args:
            entry.warnings.append(
                f"{where}.runtimeArguments ({' '.join(runtime_args)}) are not applied: "
                "the sandbox policy decides mounts, network and resources."
            )
        argv = ["docker", "run", "-i", "--rm", image, *package_args]
    entry.fields.update(
        {
            "transport": Transport.STDIO,
            "command": argv,
            "working_directory": "",
            "url": "",
            "headers": {},
            "env": _inputs(
                entry,
                package.get("environmentVariables"),
                f"{where}.environmentVariables",
                "environment variable",
            ),
            "package_registry": registry,
            "package_identifier": identifier,
            "package_version": version,
            "image": image,
        }
    )
    return True


def _oci_reference(identifier: str, version: str | None) -> tuple[str, str | None, str]:
    """Split an image reference into (repository, tag or digest, full reference).

    Since schema 2025-10-11 the tag is part of the identifier (ghcr.io/org/server:1.2.3); older
    files give it as `version`.
    """
    if "@" in identifier:
        repository, digest = identifier.split("@", 1)
        return repository, digest, identifier
    last = identifier.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = identifier.rsplit(":", 1)
        return repository, tag, identifier
    if version:
        return identifier, version, f"{identifier}:{version}"
    return identifier, None, identifier


def _warn_hint(entry: ParsedEntry, hint: Any, runner: str, where: str) -> None:
    if hint and hint != runner:
        entry.warnings.append(
            f"{where}.runtimeHint is {hint!r}; Toolroom runs this package with {runner}."
        )


def _apply_remote(entry: ParsedEntry, remote: dict[str, Any], where: str) -> bool:
    url = remote.get("url")
    entry.field_labels.update({"url": f"{where}.url", "headers": f"{where}.headers"})
    if not isinstance(url, str) or not url:
        entry.problem(f"{where}.url", "The remote has no URL.")
        return False
    url = _substitute(url, remote.get("variables"))
    unresolved = _TEMPLATE.findall(url)
    if unresolved:
        entry.problem(
            f"{where}.url",
            f"The URL has template variables without a default ({', '.join(unresolved)}); "
            "import it with the values filled in.",
        )
        return False
    entry.fields.update(
        {
            "transport": _REMOTE_TYPES[remote["type"]],
            "url": url,
            "headers": _inputs(entry, remote.get("headers"), f"{where}.headers", "header"),
            "command": [],
            "working_directory": "",
            "env": {},
            "package_registry": "",
            "package_identifier": "",
            "package_version": "",
            "image": "",
        }
    )
    return True


def _substitute(value: str, variables: Any) -> str:
    """Fill `{name}` placeholders from the input's variables (their value, else their default)."""
    if not isinstance(variables, dict):
        return value

    def fill(match: re.Match[str]) -> str:
        spec = variables.get(match[1])
        if isinstance(spec, dict):
            for key in ("value", "default"):
                if isinstance(spec.get(key), str):
                    return str(spec[key])
        return match[0]

    return _TEMPLATE.sub(fill, value)


def _input_value(spec: dict[str, Any]) -> str | None:
    for key in ("value", "default"):
        if isinstance(spec.get(key), str):
            return _substitute(spec[key], spec.get("variables"))
    return None


def _arguments(entry: ParsedEntry, arguments: Any, where: str) -> list[str]:
    """Command-line arguments from positional and named inputs that carry a value or default."""
    if arguments is None:
        return []
    if not isinstance(arguments, list):
        entry.problem(where, "Arguments must be a list.")
        return []
    argv: list[str] = []
    for index, argument in enumerate(arguments):
        if not isinstance(argument, dict) or argument.get("type") not in ("positional", "named"):
            entry.problem(
                f"{where}[{index}]", "Each argument is an object of type positional or named."
            )
            continue
        value = _input_value(argument)
        label = argument.get("name") or argument.get("valueHint") or f"#{index + 1}"
        named = argument["type"] == "named"
        if named and not isinstance(argument.get("name"), str):
            entry.problem(f"{where}[{index}].name", "A named argument needs its flag name.")
            continue
        if value is None:
            if argument.get("isRequired"):
                entry.warnings.append(
                    f"The required argument {label} has no value in the file; add it to "
                    "the command before approving."
                )
            continue
        argv += [argument["name"], value] if named else [value]
        if _TEMPLATE.search(value):
            entry.warnings.append(
                f"The argument {label} keeps placeholders ({value}); replace them in the "
                "command before approving."
            )
    return argv


def _inputs(entry: ParsedEntry, inputs: Any, where: str, kind: str) -> dict[str, str | None]:
    """Environment variables or headers: the value or default when given; required ones without
    either are stored empty, with a warning to set them; optional ones are left out."""
    if inputs is None:
        return {}
    if not isinstance(inputs, list):
        entry.problem(where, f"Each {kind} is an object in a list.")
        return {}
    values: dict[str, str | None] = {}
    missing: list[str] = []
    for index, spec in enumerate(inputs):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            entry.problem(f"{where}[{index}]", f"Each {kind} needs a `name`.")
            continue
        name: str = spec["name"]
        value = _input_value(spec)
        if value is not None:
            values[name] = value
        elif spec.get("isRequired"):
            values[name] = ""
            missing.append(name + (" (secret)" if spec.get("isSecret") else ""))
    if missing:
        entry.warnings.append(
            f"Required {kind}s without a value are stored empty: {', '.join(missing)}. "
            "Set them in the admin before approving."
        )
    return values
