"""Catalogue documents built from per-tool JSON fragments, each rendered once and kept in memory.

More: docs/catalogue.md, "Module notes".
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any, TypeGuard

from django.db import connection
from django.db.models import F, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast

from registry.catalogue.formats import (
    TOOLROOM_META,
    preflight_data,
    server_entry_native,
    tool_entry_anthropic,
    tool_entry_mcp,
    tool_entry_native,
    tool_entry_openai,
    upstream_mark,
    upstream_mark_note,
)
from registry.catalogue.naming import namespaced_tool_name
from registry.catalogue.selectors import (
    Catalogue,
    CatalogueServer,
    CatalogueTool,
    call_deadlines,
    catalogue_preflight,
    visible_tool_rows,
)
from registry.core.process_cache import VersionedCache
from registry.servers.models import Health, Tool
from registry.servers.tool_definitions import TASK_SUPPORT
from registry.teams.callers import Caller

FRAGMENTS_KEPT = 50_000

_FIELDS = (
    "pk",
    "server_id",
    "server__name",
    "server__description",
    "server__version",
    "server__category__slug",
    "server__category__name",
    "server__status__health",
    "server__gateway_policy__call_deadline_seconds",
    "server__gateway_policy__max_call_seconds",
    "server__upstream_auth",
    # From here to the row's end (the tool row's version comes last): what a fragment is made
    # of, its key in the store (with the format) as one slice of the row.
    "server__slug",
    "name",
)
_KEY_FROM = _FIELDS.index("server__slug")
# Names are pure functions of (server slug, tool name) and cost two regular expressions each.
_namespaced_tool_name = functools.lru_cache(maxsize=FRAGMENTS_KEPT)(namespaced_tool_name)

# What a tool's fragment is made of besides its name and server slug: read (and the JSON columns
# decoded) only for a tool whose fragment is not kept yet.
_DETAIL_FIELDS = ("title", "description", "permission_class", "definition_hash")
# The JSON columns as the text the database holds.
_RAW_JSON = {
    "input_schema_text": Cast("input_schema", TextField()),
    "output_schema_text": Cast("output_schema", TextField()),
    "annotations_text": Cast("annotations", TextField()),
    "task_support_text": TASK_SUPPORT,
}
# The tool row's version, in the key of its fragments. PostgreSQL, outside a transaction: the
# row's `xmin`, the transaction that wrote the version read, so every committed write of the row
# changes it whatever wrote it, and the catalogue query need not carry 1,000 tools' JSON (about
# 500 KB of text the database converts and sends) on every uncached answer. Inside a transaction
# (which may write a row twice under one `xmin`) and on other databases: the fragment's inputs.
_PG_ROW_VERSION = {"row_version": RawSQL('"servers_tool"."xmin"::text', ())}
_CONTENT_VERSION = {
    **{f"{name}_version": F(name) for name in _DETAIL_FIELDS},
    **{f"{name}_version": expression for name, expression in _RAW_JSON.items()},
}


def _row_version() -> dict[str, Any]:
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        return _PG_ROW_VERSION
    return _CONTENT_VERSION


# The native entry's last keys, written per request (they change without the tool changing).
_NATIVE_DYNAMIC = (
    "serverHealth",
    "unhealthy",
    "accessExpiresAt",
    "callDeadlineSeconds",
    "maxCallSeconds",
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


class FragmentStore:
    """Encoded tool fragments by what they are made of, at most `limit` (least recently used
    dropped first)."""

    def __init__(self, limit: int = FRAGMENTS_KEPT) -> None:
        self._fragments: VersionedCache[tuple[Any, ...], str] = VersionedCache(
            "tool fragments", limit=limit
        )
        self.rendered = 0  # how many were made (not found): for tests and curiosity

    def find(self, key: tuple[Any, ...]) -> str | None:
        return self._fragments.get(key)

    def find_many(self, keys: list[tuple[Any, ...]]) -> list[str | None]:
        return self._fragments.get_many(keys)

    def keep(self, key: tuple[Any, ...], fragment: str) -> str:
        self.rendered += 1
        return self._fragments.put(key, fragment)


fragments = FragmentStore()


def _tool(row: dict[str, Any], name: str, health: str) -> CatalogueTool:
    """The tool a row (by column name) stands for, its JSON decoded exactly as the JSONFields
    would."""
    output_text = row["output_schema_text"]
    return CatalogueTool(
        name=name,
        tool_id=row["pk"],
        tool_name=row["name"],
        server_id=row["server_id"],
        server_slug=row["server__slug"],
        title=row["title"],
        description=row["description"],
        input_schema=json.loads(row["input_schema_text"]) or {},
        output_schema=json.loads(output_text) if output_text is not None else None,
        annotations=json.loads(row["annotations_text"]) or {},
        permission_class=row["permission_class"],
        definition_hash=row["definition_hash"],
        server_health=health,
        access_expires_at=None,
        task_support=row["task_support_text"] or "",
        upstream_auth=row["server__upstream_auth"] or "shared",
    )


# The formats whose tool entry is all static (kept whole, by the caller's account mark's sentence
# too: it is a line of the description).
_WHOLE_ENTRY = ("openai", "anthropic")


def _static_part(fmt: str, tool: CatalogueTool, caller: Caller | None = None) -> str:
    """A tool's encoded entry up to where the per-request values go (all of it for OpenAI and
    Anthropic, with `caller`'s account mark in the description)."""
    if fmt == "native":
        entry = tool_entry_native(tool)
        assert tuple(entry)[-len(_NATIVE_DYNAMIC) :] == _NATIVE_DYNAMIC  # noqa: S101 (its shape)
        for key in _NATIVE_DYNAMIC:
            del entry[key]
        return _dumps(entry)[:-1] + ',"serverHealth":'
    if fmt == "mcp":
        entry = tool_entry_mcp(tool)
        inner = entry.pop("_meta")[TOOLROOM_META]
        assert list(inner)[-1] == "serverHealth"  # noqa: S101 (the per-request value comes last)
        del inner["serverHealth"]
        return (
            _dumps(entry)[:-1]
            + f',"_meta":{{{_dumps(TOOLROOM_META)}:{_dumps(inner)[:-1]},"serverHealth":'
        )
    if fmt == "openai":
        return _dumps(tool_entry_openai(tool, caller))
    return _dumps(tool_entry_anthropic(tool, caller))


def _all_found(statics: list[str | None]) -> TypeGuard[list[str]]:
    return None not in statics


def _render_missing(
    fmt: str,
    named: list[tuple[str, Sequence[Any]]],
    keys: list[tuple[Any, ...]],
    statics: list[str | None],
    *,
    column: dict[str, int],
    row_version: dict[str, Any],
    store: FragmentStore,
    caller: Caller | None,
) -> tuple[list[tuple[str, Sequence[Any]]], list[tuple[Any, ...]], list[str]]:
    """Render (and keep) the fragments `statics` lacks, from one query for those tools' details
    (one per 999 of them on SQLite).

    A fragment is kept only if the row read now is the version the catalogue query saw (a write
    in between renders it for this answer alone); a tool deleted in between is left out."""
    missing = {
        named[place][1][column["pk"]]: place for place, found in enumerate(statics) if found is None
    }
    version_names = tuple(row_version)
    detail_names = ("pk", *_DETAIL_FIELDS, *version_names, *_RAW_JSON)
    ids = list(missing)
    per_query = connection.features.max_query_params or len(ids)  # SQLite: 999 parameters
    details = (
        detail
        for start in range(0, len(ids), per_query)
        for detail in Tool.objects.filter(pk__in=ids[start : start + per_query])
        .annotate(**row_version, **_RAW_JSON)
        .order_by()
        .values_list(*detail_names)
    )
    for detail in details:
        place = missing.pop(detail[0])
        name, row = named[place]
        by_name = {
            **dict(zip(column, row, strict=True)),
            **dict(zip(detail_names, detail, strict=True)),
        }
        static = _static_part(fmt, _tool(by_name, name, ""), caller)
        seen = tuple(row[column[version]] for version in version_names)
        if seen == tuple(by_name[version] for version in version_names):
            store.keep(keys[place], static)
        statics[place] = static
    if not missing and _all_found(statics):
        return named, keys, statics
    kept = [place for place, static in enumerate(statics) if static is not None]
    rendered = [static for static in statics if static is not None]
    return [named[p] for p in kept], [keys[p] for p in kept], rendered


def tools_document_body(
    *,
    fmt: str,
    team_id: int,
    role_id: int,
    version: int,
    category: str | None = None,
    declared_servers: Mapping[str, list[str]] | None = None,
    at: datetime | None = None,
    store: FragmentStore = fragments,
    caller: Caller | None = None,
) -> bytes:
    """The encoded tools document of a format for a team's agent of a role, now (the pre-flight
    of `declared_servers` in the native format; `caller`'s account marks on per-person tools).
    Raises `UnknownRole` like `catalogue_for_agent`."""
    row_version = _row_version()
    visible = visible_tool_rows(
        team_id=team_id, role_id=role_id, category=category, at=at, fields=_FIELDS, **row_version
    )
    rows = visible.rows
    column = visible.columns
    pk, server_id_at, slug_at, name_at = (
        column["pk"],
        column["server_id"],
        column["server__slug"],
        column["name"],
    )
    health_at = column["server__status__health"]
    deadline_at = column["server__gateway_policy__call_deadline_seconds"]
    maximum_at = column["server__gateway_policy__max_call_seconds"]
    assert tuple(column)[_KEY_FROM:] == (*_FIELDS[_KEY_FROM:], *row_version)  # noqa: S101
    named = sorted(
        ((_namespaced_tool_name(row[slug_at], row[name_at]), row) for row in rows),
        key=itemgetter(0),
    )
    # A per-person server's tools carry the caller's account mark (by server): the native and
    # MCP entries end with it, encoded per request; the OpenAI and Anthropic ones hold its
    # sentence in their description, so it is part of their fragment's key.
    mode_at = column["server__upstream_auth"]
    marks: dict[int, dict[str, str] | None] = {}

    def server_mark(row: Sequence[Any]) -> dict[str, str] | None:
        server_id = row[server_id_at]
        if server_id not in marks:
            marks[server_id] = upstream_mark(row[mode_at] or "shared", row[slug_at], caller)
        return marks[server_id]

    tails_of_marks: dict[int, str] = {}

    def mark_of(row: Sequence[Any]) -> str:
        server_id = row[server_id_at]
        found = tails_of_marks.get(server_id)
        if found is None:
            mark = server_mark(row)
            found = "" if mark is None else f',"upstreamAccount":{_dumps(mark)}'
            tails_of_marks[server_id] = found
        return found

    whole = fmt in _WHOLE_ENTRY
    # The tool's id too: rows written by one transaction share their `xmin`, so two servers'
    # same-named tools could otherwise meet under one key after their slugs were swapped.
    keys = [
        (fmt, upstream_mark_note(server_mark(row)) if whole else "", row[pk], *row[_KEY_FROM:])
        for _, row in named
    ]
    found = store.find_many(keys)
    if _all_found(found):
        statics = found
    else:  # tools new in this shape: read, rendered and kept
        named, keys, statics = _render_missing(
            fmt,
            named,
            keys,
            found,
            column=column,
            row_version=row_version,
            store=store,
            caller=caller if whole else None,
        )
        if len(named) != len(rows):  # a tool deleted between the two queries is left out
            rows = [row for _, row in named]
    # Native: health and expiry, encoded; by server while no grant names a tool alone.

    tails: dict[Any, str] = {}
    by_server = not visible.tool_expiry
    parts: list[str] = []
    append = parts.append
    for (_, row), static in zip(named, statics, strict=True):
        if fmt == "native":
            server_id = row[server_id_at]
            tail_key = server_id if by_server else (server_id, row[pk])
            tail = tails.get(tail_key)
            if tail is None:
                health = row[health_at] or Health.UNKNOWN
                expiry = visible.access_expires_at(server_id, row[pk])
                deadline, maximum = call_deadlines(row[deadline_at], row[maximum_at])
                tail = tails[tail_key] = (
                    f'{_dumps(health)},"unhealthy":'
                    f"{'true' if health == Health.UNHEALTHY else 'false'},"
                    f'"accessExpiresAt":{_dumps(_iso(expiry))},'
                    f'"callDeadlineSeconds":{_dumps(deadline)},"maxCallSeconds":{_dumps(maximum)}'
                    f"{mark_of(row)}}}"
                )
            append(static + tail)
        elif fmt == "mcp":
            append(f"{static}{_dumps(row[health_at] or Health.UNKNOWN)}{mark_of(row)}}}}}}}")
        else:
            append(static)
    tools = ",".join(parts)
    if fmt != "native":
        return f'{{"tools":[{tools}]}}'.encode()

    servers: dict[int, CatalogueServer] = {}
    counts: dict[int, int] = {}
    for row in rows:
        server_id = row[server_id_at]
        counts[server_id] = counts.get(server_id, 0) + 1
        if server_id not in servers:
            servers[server_id] = CatalogueServer(
                id=server_id,
                slug=row[slug_at],
                name=row[column["server__name"]],
                description=row[column["server__description"]],
                version=row[column["server__version"]],
                # Only the official server list reads these four; the tools documents do not,
                # so they are not fetched (two timestamps per tool row cost more than the rest).
                homepage_url="",
                repository_url="",
                category_slug=row[column["server__category__slug"]],
                category_name=row[column["server__category__name"]],
                health=row[health_at] or Health.UNKNOWN,
                created_at=visible.now,
                updated_at=visible.now,
            )
    server_list = sorted(
        (
            CatalogueServer(**{**server.__dict__, "tool_count": counts[server.id]})
            for server in servers.values()
        ),
        key=lambda server: server.slug,
    )
    role = visible.role
    head = {
        "team": {"slug": role.team_slug, "name": role.team_name},
        "role": {"name": role.name, "permissionClasses": role.permission_classes},
        "version": version,
        "generatedAt": _iso(visible.now),
        "servers": [server_entry_native(server) for server in server_list],
    }
    document = f'{_dumps(head)[:-1]},"tools":[{tools}]'
    if declared_servers:
        catalogue = Catalogue(
            team_id=team_id,
            team_slug=role.team_slug,
            team_name=role.team_name,
            role_id=role_id,
            role_name=role.name,
            permission_classes=role.permission_classes,
            generated_at=visible.now,
            servers=server_list,
            tools=[],  # the pre-flight reads servers and grants only
            granted_server_ids=visible.granted_server_ids,
        )
        preflight = catalogue_preflight(catalogue=catalogue, declared_servers=declared_servers)
        document += f',"preflight":{_dumps(preflight_data(preflight))}'
    return (document + "}").encode()
