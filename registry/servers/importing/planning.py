"""Planning an import: parse and check everything a file says, write nothing, and say what would
change.

`import_plan` runs every entry through the model's own `full_clean` (on an unsaved server, or a
copy of the stored one), so an import obeys exactly the rules the admin form and the services
obey. Every problem in the file is collected before anything is refused, so an admin fixes the
file once rather than once per error.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError

from registry.servers.dependency_locks import (
    LockError,
    dependencies_resolve,
    lock_matches,
)
from registry.servers.importing import mcp_json, server_json, toolroom_yaml
from registry.servers.importing.changes import (
    SECRET_FIELDS,
    FieldChange,
    creation_changes,
    update_changes,
)
from registry.servers.importing.entries import (
    ImportFileError,
    ImportProblem,
    ParsedCategory,
    ParsedEntry,
    ParsedFile,
)
from registry.servers.importing.launchers import PackagePin, entries_adopt_launchers
from registry.servers.importing.policy_fit import fit_policy
from registry.servers.importing.reading import (
    FORMAT_AUTO,
    FORMAT_LABELS,
    FORMAT_MCP_JSON,
    FORMAT_SERVER_JSON,
    load_document,
)
from registry.servers.importing.upstream_client import UPSTREAM_CLIENT, upstream_client_change
from registry.servers.importing.variables import ProcessVariables
from registry.servers.jobs.sandbox_checks import server_sandbox_launch_warnings
from registry.servers.models import Category, McpServer, Transport, UpstreamAuth
from registry.servers.oauth_probe import has_authorization_header, oauth_resource_metadata
from registry.servers.policy import Isolation, TrustTier, is_trust_increase
from registry.servers.services import servers as services


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
    runs_local: bool = False  # a command run as a process on the workers' host, unsandboxed
    # The upstream OAuth client to store (upstream_client.py), when the file names a new one.
    upstream_client: dict[str, str] | None = field(default=None, repr=False)

    @property
    def changed_fields(self) -> list[str]:
        """The server's fields the import sets."""
        return [change.field for change in self.changes if change.field != UPSTREAM_CLIENT]

    @property
    def action_text(self) -> str:
        """What the import does to this server, in words: an entry named like a server that
        exists changes that server, and the plan says so by name."""
        if self.action == ImportAction.UPDATE:
            return f"updates existing server '{self.slug}'"
        if self.action == ImportAction.UNCHANGED:
            return f"unchanged (existing server '{self.slug}')"
        return "create"


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
    def updated_slugs(self) -> list[str]:
        """The existing servers this import would change: the importer confirms them first."""
        return [entry.slug for entry in self.entries_with(ImportAction.UPDATE)]

    @property
    def local_processes_vouched(self) -> list[EntryPlan]:
        """With the tier option builtin every entry is vouched for: the ones that would run as a
        local process, where a poisoned server would run unsandboxed on the host."""
        vouched = self.options.tier == TrustTier.BUILTIN
        return [entry for entry in self.entries if vouched and entry.runs_local]

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
    fit_policy(values, base, warnings, tier_refused=tier_refused)
    problems += _lock_dependencies(entry, values, base)
    _recognise_person_oauth(values, base, warnings)

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
        runs_local=candidate.transport == Transport.STDIO
        and candidate.isolation == Isolation.LOCAL,
    )
    if existing is None:
        plan.changes = creation_changes(values, category if category_set else None)
    else:
        plan.server_id = existing.pk
        plan.server_updated_at = existing.updated_at
        plan.changes = update_changes(
            existing=existing,
            candidate=candidate,
            values=values,
            category=category,
            category_set=category_set,
        )
    if entry.upstream_client and (
        change := upstream_client_change(entry.upstream_client, existing)
    ):
        plan.changes.append(change)
        plan.upstream_client = entry.upstream_client
    if existing is not None:
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


def _lock_dependencies(
    entry: ParsedEntry, values: dict[str, Any], base: McpServer
) -> list[ImportProblem]:
    """Resolve and record a package's whole dependency tree when the package is new or moved
    (registry/servers/dependency_locks.py); a lock that still fits is kept as it is."""
    if not settings.TOOLROOM_IMPORT_LOCK_DEPENDENCIES:
        return []

    def current(name: str) -> Any:
        return values[name] if name in values else getattr(base, name)

    registry = current("package_registry")
    identifier, version = current("package_identifier"), current("package_version")
    if registry not in ("pypi", "npm") or not identifier or not version:
        if base.package_lock:
            values["package_lock"] = {}
        return []
    if lock_matches(base.package_lock, registry=registry, identifier=identifier, version=version):
        return []
    try:
        lock = dependencies_resolve(registry=registry, identifier=identifier, version=version)
    except LockError as exc:
        return [ImportProblem(entry.label, entry.label_for("package_version"), exc.message)]
    values["package_lock"] = lock.as_json()
    return []


def _recognise_person_oauth(values: dict[str, Any], base: McpServer, warnings: list[str]) -> None:
    """An HTTP server that answers 401 naming its OAuth resource metadata signs each person in:
    it is imported as a per-person server (unless the file sends a shared Authorization header,
    which is then only warned about)."""
    if not settings.TOOLROOM_IMPORT_PROBE_OAUTH:
        return

    def current(name: str) -> Any:
        return values[name] if name in values else getattr(base, name)

    if current("upstream_auth") != UpstreamAuth.SHARED or current("transport") not in (
        Transport.STREAMABLE_HTTP,
        Transport.SSE,
    ):
        return
    if base.pk is not None and "url" not in values:
        return
    metadata = oauth_resource_metadata(current("url"), transport=current("transport"))
    if not metadata:
        return
    found = (
        f"It answers 401 without a token and names its OAuth resource metadata ({metadata[:200]}): "
        "it signs each person in with their own account"
    )
    if has_authorization_header(current("headers")):
        warnings.append(
            f"{found}. The file sends a shared Authorization header, so it stays shared; set its "
            "upstream authentication to each person's OAuth if it should act for each person."
        )
        return
    values["upstream_auth"] = UpstreamAuth.PERSON_OAUTH
    warnings.append(
        f"{found}, so it is imported as a per-person server (each person's OAuth): people link "
        "their accounts under Connected accounts, and an admin links one to discover its tools."
    )


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
