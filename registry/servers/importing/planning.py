"""Planning an import: parse and check everything a file says, write nothing, and say what would
change.

`import_plan` runs every entry through the model's own `full_clean` (on an unsaved server, or a
copy of the stored one), so an import obeys exactly the rules the admin form and the services
obey. Every problem in the file is collected before anything is refused, so an admin fixes the
file once rather than once per error.
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError

from registry.core.secret_fields import mask_secret
from registry.servers import services
from registry.servers.importing import mcp_json, server_json, toolroom_yaml
from registry.servers.importing.entries import (
    ImportFileError,
    ImportProblem,
    ParsedCategory,
    ParsedEntry,
    ParsedFile,
)
from registry.servers.importing.launchers import PackagePin, entries_adopt_launchers
from registry.servers.importing.reading import (
    FORMAT_AUTO,
    FORMAT_LABELS,
    FORMAT_MCP_JSON,
    FORMAT_SERVER_JSON,
    load_document,
)
from registry.servers.importing.variables import ProcessVariables
from registry.servers.models import Category, McpServer
from registry.servers.operations.sandbox_checks import server_sandbox_launch_warnings
from registry.servers.policy import (
    NetworkMode,
    TrustTier,
    allowed_network_modes,
    is_trust_increase,
    tier_policy,
)

SECRET_FIELDS = ("env", "headers")


class ImportAction(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class ImportOptions:
    """What the person importing decides, beyond what the file says.

    `tier` and `category` apply to every entry (they win over the file, with a warning where
    they differ). `may_vouch_tier`: whether the importer may give a tier above untrusted
    (operators on the command line may; in the admin, users with `servers.vouch_trust_tier`).
    `environ` is where Toolroom YAML's ${VAR} come from (by default the operator-allowed part of
    the process environment, see `variables`).
    """

    format: str = FORMAT_AUTO
    tier: str | None = None
    category: str | None = None
    may_vouch_tier: bool = True
    dry_run: bool = False
    environ: Mapping[str, str] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class FieldChange:
    """One server field that an import sets: `old` and `new` are display text, secrets masked."""

    field: str
    old: str
    new: str


@dataclass
class EntryPlan:
    label: str
    slug: str
    name: str
    action: ImportAction
    changes: list[FieldChange] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # The model values to write (secrets in clear): never shown, never repr'd.
    values: dict[str, Any] = field(default_factory=dict, repr=False)
    category: str | None = None
    category_set: bool = False
    server_id: int | None = None
    server_updated_at: datetime | None = None
    # Packages pinned at import (their launcher named no version): recorded in the audit.
    pins: list[PackagePin] = field(default_factory=list)

    @property
    def changed_fields(self) -> list[str]:
        return [change.field for change in self.changes]


@dataclass(frozen=True)
class CategoryPlan:
    slug: str
    name: str
    description: str
    action: ImportAction


@dataclass
class ImportPlan:
    format: str
    filename: str | None
    options: ImportOptions
    entries: list[EntryPlan] = field(default_factory=list)
    categories: list[CategoryPlan] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def format_label(self) -> str:
        return FORMAT_LABELS.get(self.format, self.format)

    def entries_with(self, action: ImportAction) -> list[EntryPlan]:
        return [entry for entry in self.entries if entry.action == action]

    @property
    def has_changes(self) -> bool:
        return any(e.action != ImportAction.UNCHANGED for e in self.entries) or any(
            c.action != ImportAction.UNCHANGED for c in self.categories
        )

    def summary(self) -> str:
        counts = [
            f"{len(self.entries_with(ImportAction.CREATE))} to create",
            f"{len(self.entries_with(ImportAction.UPDATE))} to update",
            f"{len(self.entries_with(ImportAction.UNCHANGED))} unchanged",
        ]
        new_categories = [c for c in self.categories if c.action == ImportAction.CREATE]
        changed_categories = [c for c in self.categories if c.action == ImportAction.UPDATE]
        text = "Servers: " + ", ".join(counts) + "."
        if new_categories or changed_categories:
            text += (
                f" Categories: {len(new_categories)} to create, "
                f"{len(changed_categories)} to update."
            )
        return text


def import_plan(
    *, content: bytes, filename: str | None = None, options: ImportOptions
) -> ImportPlan:
    """Parse and check `content` completely, without writing anything.

    Raises ImportFileError listing every problem (each naming the entry and the field) when
    anything in the file cannot be imported; otherwise returns what an import would do.
    """
    problems = _option_problems(options)
    fmt, data, parse_problems = load_document(
        content=content, filename=filename, format=options.format
    )
    parsed = _parse(fmt, data, options)
    entries_adopt_launchers(parsed.entries, lookup=None)
    problems += parse_problems + parsed.problems
    problems += _collision_problems(parsed.entries)

    referenced = {c.slug for c in parsed.categories} | {
        e.category for e in parsed.entries if e.category
    }
    if options.category:
        referenced.add(options.category)
    stored_categories = {c.slug: c for c in Category.objects.filter(slug__in=referenced)}
    category_plans, category_problems = _plan_categories(parsed.categories, stored_categories)
    problems += category_problems
    known_categories = set(stored_categories) | {c.slug for c in parsed.categories}
    if options.category and options.category not in known_categories:
        problems.append(
            ImportProblem(
                None,
                "category",
                f"There is no category {options.category!r}; create it in the admin first.",
            )
        )

    stored = {
        server.slug: server
        for server in McpServer.objects.select_related("category").filter(
            slug__in=[entry.slug for entry in parsed.entries if entry.slug]
        )
    }
    plans: list[EntryPlan] = []
    for entry in parsed.entries:
        problems += entry.problems
        if entry.problems:
            continue
        entry_plan, entry_problems = _plan_entry(
            entry, stored.get(entry.slug), options, stored_categories, known_categories
        )
        problems += entry_problems
        plans.append(entry_plan)
    if problems:
        # File-level problems first, then entry by entry in the file's order.
        order = {entry.label: index for index, entry in enumerate(parsed.entries)}
        problems.sort(key=lambda p: (p.entry is not None, order.get(p.entry or "", len(order))))
        raise ImportFileError(problems)
    return ImportPlan(
        format=fmt,
        filename=filename,
        options=options,
        entries=plans,
        categories=category_plans,
        warnings=parsed.warnings,
    )


def _option_problems(options: ImportOptions) -> list[ImportProblem]:
    problems: list[ImportProblem] = []
    if options.tier is not None and options.tier not in TrustTier.values:
        problems.append(
            ImportProblem(
                None,
                "tier",
                f"{options.tier!r} is not a trust tier ({', '.join(TrustTier.values)}).",
            )
        )
    elif options.tier and options.tier != TrustTier.UNTRUSTED and not options.may_vouch_tier:
        problems.append(
            ImportProblem(
                None,
                "tier",
                f"You may not vouch for the {TrustTier(options.tier).label} tier: giving imported "
                "servers a tier above untrusted needs the permission 'Can give imported servers a "
                "trust tier above untrusted'.",
            )
        )
    return problems


def _parse(fmt: str, data: dict[str, Any], options: ImportOptions) -> ParsedFile:
    if fmt == FORMAT_MCP_JSON:
        return mcp_json.parse(data)
    if fmt == FORMAT_SERVER_JSON:
        return server_json.parse(data)
    environ = options.environ if options.environ is not None else ProcessVariables()
    return toolroom_yaml.parse(data, environ=environ)


def _collision_problems(entries: Iterable[ParsedEntry]) -> list[ImportProblem]:
    by_slug: dict[str, list[ParsedEntry]] = defaultdict(list)
    for entry in entries:
        if entry.slug:
            by_slug[entry.slug].append(entry)
    problems: list[ImportProblem] = []
    for slug, group in by_slug.items():
        if len(group) < 2:
            continue
        names = " and ".join(repr(entry.label) for entry in group)
        problems.extend(
            ImportProblem(
                entry.label,
                "name",
                f"{names} both become the slug {slug!r}; rename one so that each server has "
                "its own slug.",
            )
            for entry in group
        )
    return problems


def _plan_categories(
    categories: list[ParsedCategory], stored: dict[str, Category]
) -> tuple[list[CategoryPlan], list[ImportProblem]]:
    plans: list[CategoryPlan] = []
    problems: list[ImportProblem] = []
    seen: set[str] = set()
    for index, category in enumerate(categories):
        label = f"categories[{index}]"
        if category.slug in seen:
            problems.append(
                ImportProblem(label, "slug", f"The category {category.slug!r} is defined twice.")
            )
            continue
        seen.add(category.slug)
        candidate = Category(
            slug=category.slug, name=category.name, description=category.description
        )
        try:
            candidate.full_clean(validate_unique=False)
        except ValidationError as exc:
            problems.extend(
                ImportProblem(label, name, message)
                for name, messages in exc.message_dict.items()
                for message in messages
            )
            continue
        existing = stored.get(category.slug)
        if existing is None:
            action = ImportAction.CREATE
        elif (existing.name, existing.description) != (category.name, category.description):
            action = ImportAction.UPDATE
        else:
            action = ImportAction.UNCHANGED
        plans.append(CategoryPlan(category.slug, category.name, category.description, action))
    return plans, problems


def _plan_entry(
    entry: ParsedEntry,
    existing: McpServer | None,
    options: ImportOptions,
    stored_categories: dict[str, Category],
    known_categories: set[str],
) -> tuple[EntryPlan, list[ImportProblem]]:
    problems: list[ImportProblem] = []
    warnings = list(entry.warnings)
    base = existing if existing is not None else McpServer()
    values = dict(entry.fields)
    if existing is None:
        values["slug"] = entry.slug
        for name, value in entry.create_defaults.items():
            values.setdefault(name, value)

    category, category_set = _entry_category(entry, options, warnings)
    # A missing category given as an option is reported once, for the whole file.
    if category_set and category and category not in known_categories and not options.category:
        problems.append(
            ImportProblem(
                entry.label,
                entry.label_for("category"),
                f"There is no category {category!r}; define it under `categories:` or create it "
                "in the admin first.",
            )
        )

    tier, tier_refused = _entry_tier(entry, existing, options, warnings)
    if tier is not None:
        values["trust_tier"] = tier

    for name in SECRET_FIELDS:
        if name in values:
            values[name] = _resolve_secrets(
                entry, name, values[name], getattr(base, name) or {}, warnings
            )
    _fit_policy(values, base, warnings, tier_refused=tier_refused)

    candidate = copy.deepcopy(existing) if existing is not None else McpServer()
    for name, value in values.items():
        setattr(candidate, name, value)
    if category_set:
        candidate.category = stored_categories.get(category) if category else None
    try:
        # Categories are checked above (one may be created by this same import).
        candidate.full_clean(exclude=["category"])
    except ValidationError as exc:
        problems.extend(
            ImportProblem(
                entry.label, None if name == NON_FIELD_ERRORS else entry.label_for(name), message
            )
            for name, messages in exc.message_dict.items()
            for message in messages
        )

    tier_option_refused = options.tier not in (None, TrustTier.UNTRUSTED)  # said once, above
    if not options.may_vouch_tier and not problems and not tier_option_refused:
        # The services refuse it too; the plan says so before anyone confirms.
        changed = set(values) if existing is None else set(_changed_names(existing, candidate))
        reasons = services.vouch_reasons(existing, candidate, changed)
        if reasons:
            problems.append(ImportProblem(entry.label, None, services.vouch_refusal(reasons)))

    if not problems:
        warnings.extend(server_sandbox_launch_warnings(candidate))

    plan = EntryPlan(
        label=entry.label,
        slug=entry.slug,
        name=str(values.get("name", base.name)),
        action=ImportAction.CREATE,
        warnings=warnings,
        values=values,
        category=category,
        category_set=category_set,
        pins=list(entry.pins),
    )
    if existing is None:
        plan.changes = _creation_changes(values, category if category_set else None)
    else:
        plan.server_id = existing.pk
        plan.server_updated_at = existing.updated_at
        plan.changes = _update_changes(
            existing=existing,
            candidate=candidate,
            values=values,
            category=category,
            category_set=category_set,
        )
        plan.action = ImportAction.UPDATE if plan.changes else ImportAction.UNCHANGED
        if plan.changes:
            changes = {name: values[name] for name in plan.changed_fields if name in values}
            retargeted = services.secrets_drop_on_retarget(  # the services' own rule
                existing, copy.deepcopy(candidate), changes
            )
            if retargeted:
                warnings.append(
                    f"Its {', '.join(retargeted)} changes: the stored env and header values are "
                    "dropped (their names are kept) unless the file gives them anew; enter them "
                    "again in the admin."
                )
        if plan.changes and existing.review_status in services.REVIEWED_STATUSES:
            loosened = services._loosening_changes(  # the services' own rule
                existing, candidate, set(plan.changed_fields)
            )
            if loosened:
                warnings.append(
                    f"{existing.name} is {existing.get_review_status_display().lower()}; "
                    f"changing {', '.join(loosened)} sends it back to review."
                )
    return plan, problems


def _changed_names(existing: McpServer, candidate: McpServer) -> list[str]:
    return [
        name
        for name in services.SERVER_EDITABLE_FIELDS
        if name != "category" and getattr(existing, name) != getattr(candidate, name)
    ]


def _entry_category(
    entry: ParsedEntry, options: ImportOptions, warnings: list[str]
) -> tuple[str | None, bool]:
    if options.category:
        if entry.category_given and entry.category != options.category:
            warnings.append(
                f"The file puts it in category {entry.category!r}; the import option "
                f"{options.category!r} wins."
            )
        return options.category, True
    if entry.category_given:
        return entry.category, True
    return None, False


def _entry_tier(
    entry: ParsedEntry, existing: McpServer | None, options: ImportOptions, warnings: list[str]
) -> tuple[str | None, bool]:
    """The tier to set (None: leave it as it is; new servers start untrusted), and whether the
    tier the file asked for was refused because the importer may not vouch for it."""
    baseline = existing.trust_tier if existing is not None else TrustTier.UNTRUSTED
    if options.tier:
        if entry.trust_tier and entry.trust_tier != options.tier:
            warnings.append(
                f"The file gives trust tier {entry.trust_tier!r}; the import option "
                f"{options.tier!r} wins."
            )
        # An option above untrusted without the permission is refused up front.
        return options.tier, False
    requested = entry.trust_tier
    if requested is None:
        return (TrustTier.UNTRUSTED if existing is None else None), False
    if is_trust_increase(baseline, requested) and not options.may_vouch_tier:
        warnings.append(
            f"The file gives trust tier {requested!r}, but you may not vouch for trust tiers; "
            f"it stays {TrustTier(baseline).label.lower()}. Ask an admin who may to raise it."
        )
        return (TrustTier.UNTRUSTED if existing is None else None), True
    return requested, False


def _resolve_secrets(
    entry: ParsedEntry,
    name: str,
    values: dict[str, str | None],
    stored: dict[str, str],
    warnings: list[str],
) -> dict[str, str]:
    """A null value keeps the stored one (what exports without secrets write); a new name with
    a null value is stored empty, with a warning to set it."""
    resolved: dict[str, str] = {}
    unset: list[str] = []
    for key, value in values.items():
        if value is None:
            if key in stored:
                resolved[key] = stored[key]
            else:
                resolved[key] = ""
                unset.append(key)
        else:
            resolved[key] = value
    if unset:
        warnings.append(
            f"{entry.label_for(name)}: {', '.join(unset)} {'has' if len(unset) == 1 else 'have'} "
            "no value in the file and none is stored; stored empty. Set the value in the admin "
            "before approving."
        )
    return resolved


def _fit_policy(
    values: dict[str, Any], base: McpServer, warnings: list[str], *, tier_refused: bool
) -> None:
    """Tighten a policy that the tier being set no longer allows.

    A re-import that lowers a server's tier (say builtin to community) would otherwise fail on
    a policy the file never mentioned, such as a local process or an open network. When the
    tier the file asked for was refused (the importer may not vouch for it), the file's own
    policy was written for that tier and is tightened too.
    """

    def adjustable(name: str) -> bool:
        return tier_refused or name not in values

    def current(name: str) -> Any:
        return values[name] if name in values else getattr(base, name)

    tier = current("trust_tier")
    label = TrustTier(tier).label
    policy = tier_policy(tier)
    isolation = current("isolation")
    if adjustable("isolation") and isolation and isolation not in policy.isolations:
        values["isolation"] = policy.default_isolation
        warnings.append(
            f"Isolation becomes {policy.default_isolation}, as the {label} tier requires."
        )
    sensitivity = current("data_sensitivity")
    network = current("network_mode")
    if adjustable("network_mode") and network not in allowed_network_modes(tier, sensitivity):
        values["network_mode"] = NetworkMode.NONE
        warnings.append(
            f"The network becomes none: {network} is not allowed for the {label} "
            f"tier with {sensitivity} data."
        )
    if (
        current("network_mode") != NetworkMode.PROXIED
        and current("egress_allowlist")
        and (adjustable("egress_allowlist"))
    ):
        values["egress_allowlist"] = []
    for name, maximum in (
        ("memory_limit_mb", policy.max_memory_mb),
        ("cpu_limit", policy.max_cpus),
        ("pids_limit", policy.max_pids),
    ):
        limit = current(name)
        if adjustable(name) and limit is not None and limit > maximum:
            values[name] = None
            warnings.append(f"{name} falls back to the {label} tier's maximum.")


# --- Describing changes, secrets masked ----------------------------------------------------


def display_value(value: Any) -> str:
    if value is None:
        return "(none)"
    if value == "":
        return "(empty)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def describe_secrets(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[str, str]:
    """Both sides of a change to env or headers: names, masked values, what changed."""
    before = ", ".join(f"{key}={mask_secret(old[key])}" for key in sorted(old)) or "(none)"
    parts = []
    for key in sorted(new):
        marker = "" if old.get(key) == new[key] else (" (changed)" if key in old else " (new)")
        parts.append(f"{key}={mask_secret(new[key])}{marker}")
    parts += [f"{key} (removed)" for key in sorted(set(old) - set(new))]
    return before, ", ".join(parts) or "(none)"


@cache
def _defaults() -> McpServer:
    return McpServer()


_ALWAYS_SHOWN = ("slug", "name", "transport", "trust_tier")


def _creation_changes(values: dict[str, Any], category: str | None) -> list[FieldChange]:
    changes = []
    for name, value in values.items():
        if name not in _ALWAYS_SHOWN and value == getattr(_defaults(), name):
            continue
        new = describe_secrets({}, value)[1] if name in SECRET_FIELDS else display_value(value)
        changes.append(FieldChange(name, "", new))
    if category:
        changes.append(FieldChange("category", "", category))
    return _in_field_order(changes)


def _update_changes(
    *,
    existing: McpServer,
    candidate: McpServer,
    values: dict[str, Any],
    category: str | None,
    category_set: bool,
) -> list[FieldChange]:
    changes = []
    for name in values:
        old, new = getattr(existing, name), getattr(candidate, name)
        if old == new:
            continue
        if name in SECRET_FIELDS:
            before, after = describe_secrets(old or {}, new or {})
        else:
            before, after = display_value(old), display_value(new)
        changes.append(FieldChange(name, before, after))
    if category_set:
        old_category = existing.category.slug if existing.category is not None else None
        if old_category != category:
            changes.append(
                FieldChange("category", display_value(old_category), display_value(category))
            )
    return _in_field_order(changes)


def _in_field_order(changes: list[FieldChange]) -> list[FieldChange]:
    order = {f.name: index for index, f in enumerate(McpServer._meta.get_fields())}
    return sorted(changes, key=lambda change: order.get(change.field, len(order)))
