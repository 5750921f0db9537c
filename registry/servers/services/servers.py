"""Registering and editing servers: the fields an admin may set, vouching for trust tiers,
secrets dropped when a server points elsewhere, and what an edit sets off (review,
discovery, a runtime restart).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth.models import PermissionsMixin
from django.core.exceptions import ValidationError
from django.db import transaction

from registry.audit.services import Actor, audit_record
from registry.core import task_queue
from registry.core.errors import ApplicationError
from registry.servers.dependency_locks import lock_summary
from registry.servers.importing.launchers import LauncherError, launcher_parse
from registry.servers.jobs.discovery import discovery_request
from registry.servers.jobs.runtime import runtime_restart_if_held
from registry.servers.models import (
    McpServer,
    ReviewStatus,
    ServerStatus,
    Tool,
)
from registry.servers.policy import (
    NETWORK_STRICTNESS,
    Isolation,
    NetworkMode,
    TrustTier,
    allowed_network_modes,
    is_sensitivity_decrease,
    is_trust_increase,
)
from registry.servers.signals import announce_visibility_change
from registry.servers.tool_definitions import derive_permission_class

# Fields an admin (or an import) may set on a server. Review status, runtime state and tools are
# changed only by their own services.
SERVER_EDITABLE_FIELDS = frozenset(
    {
        "slug",
        "name",
        "description",
        "category",
        "version",
        "homepage_url",
        "repository_url",
        "trust_tier",
        "transport",
        "command",
        "working_directory",
        "url",
        "env",
        "headers",
        "upstream_auth",
        "person_secret_header",
        "person_secret_prefix",
        "package_registry",
        "package_identifier",
        "package_version",
        "package_lock",
        "image",
        "data_sensitivity",
        "isolation",
        "network_mode",
        "egress_allowlist",
        "storage",
        "env_not_secret",
        "memory_limit_mb",
        "cpu_limit",
        "pids_limit",
        "health_check_method",
        "health_check_tool",
        "health_check_arguments",
        "health_check_interval_seconds",
        "health_check_timeout_seconds",
        "health_failure_threshold",
        "auto_start",
        "restart_policy",
        "restart_max_attempts",
    }
)
SECRET_FIELDS = frozenset({"env", "headers"})
# Changing what runs, or where it may reach, after approval sends the server back to review.
# Env and headers are part of what runs (LD_PRELOAD, NODE_OPTIONS, PYTHONPATH, a proxy header),
# and so is whose credential goes upstream (`upstream_auth`).
LAUNCH_FIELDS = frozenset(
    {
        "env",
        "headers",
        "upstream_auth",
        "person_secret_header",
        "person_secret_prefix",
        "transport",
        "command",
        "working_directory",
        "url",
        "package_registry",
        "package_identifier",
        "package_version",
        "package_lock",
        "image",
    }
)
REVIEWED_STATUSES = (ReviewStatus.APPROVED, ReviewStatus.SUSPENDED)
# What a running server's process or container is made from: changing it restarts a warm runtime.
RUNTIME_FIELDS = LAUNCH_FIELDS | frozenset(
    {
        "env",
        "headers",
        "isolation",
        "network_mode",
        "egress_allowlist",
        "storage",
        "memory_limit_mb",
        "cpu_limit",
        "pids_limit",
    }
)
# What a sandboxed server's kept egress network and proxy are made for (its key and policy).
EGRESS_FIELDS = frozenset({"slug", "isolation", "network_mode", "egress_allowlist"})
# What agents see of a server in their catalogue (the slug is part of every tool's name).
CATALOGUE_FIELDS = frozenset(
    {"slug", "name", "description", "category", "version", "homepage_url", "repository_url"}
)


# Giving a server a tier above untrusted, or letting it run as a local process, vouches for the
# code it runs on the worker host: only people with this permission may.
VOUCH_PERMISSION = "servers.vouch_trust_tier"


def actor_may_vouch(actor: Actor) -> bool:
    """People need the vouch permission; labels other than agents are operators at the
    command line or Toolroom itself (`cli`, `system`), who own the host anyway."""
    if actor is None:
        return True
    if isinstance(actor, str):
        return not actor.startswith("agent:")
    if not isinstance(actor, PermissionsMixin) or not actor.is_active:
        return False
    return actor.has_perm(VOUCH_PERMISSION)


def vouch_reasons(before: McpServer | None, after: McpServer, changed: set[str]) -> list[str]:
    """What in this create or update only someone who may vouch for trust tiers may do."""
    reasons: list[str] = []
    above_untrusted = after.trust_tier != TrustTier.UNTRUSTED
    runs_locally = after.isolation == Isolation.LOCAL
    if before is None:
        if above_untrusted:
            reasons.append(f"give a server the {after.get_trust_tier_display()} tier")
        if runs_locally:
            reasons.append("let a server run as a local process")
        return reasons
    if "trust_tier" in changed and is_trust_increase(before.trust_tier, after.trust_tier):
        reasons.append(f"raise a server's tier to {after.get_trust_tier_display()}")
    if runs_locally and before.isolation != Isolation.LOCAL:
        reasons.append("let a server run as a local process")
    elif runs_locally and changed & RUNTIME_FIELDS:
        # What a local server runs is code on the worker host: editing it is vouching for it.
        what = ", ".join(sorted(changed & RUNTIME_FIELDS))
        reasons.append(f"change what a local process server runs ({what})")
    return reasons


def _check_vouch(
    actor: Actor, before: McpServer | None, after: McpServer, changed: set[str]
) -> None:
    reasons = vouch_reasons(before, after, changed)
    if reasons and not actor_may_vouch(actor):
        raise ApplicationError(
            vouch_refusal(reasons), field="trust_tier" if "tier" in reasons[0] else "isolation"
        )


def vouch_refusal(reasons: list[str]) -> str:
    return (
        f"You may not {'; nor '.join(reasons)}: that needs the permission 'Can give imported "
        "servers a trust tier above untrusted' (servers.vouch_trust_tier). Without it, a "
        "server stays untrusted and sandboxed."
    )


def _field_value(server: McpServer, name: str) -> Any:
    if name == "category":
        return server.category.slug if server.category is not None else None
    value = getattr(server, name)
    if name in SECRET_FIELDS:
        # Audit records which secrets exist, never their values.
        return sorted((value or {}).keys())
    if hasattr(value, "as_tuple"):  # Decimal
        return str(value)
    if name == "package_lock":  # the set by its digest; server.dependencies_locked lists it
        return (value or {}).get("digest", "")
    return value


def _snapshot(server: McpServer, fields: Iterable[str]) -> dict[str, Any]:
    return {name: _field_value(server, name) for name in fields}


def _as_validation_application_error(exc: ValidationError) -> ApplicationError:
    if hasattr(exc, "error_dict"):
        first_field = next(iter(exc.message_dict))
        text = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in exc.message_dict.items())
        return ApplicationError(text, field=first_field, extra={"fields": exc.message_dict})
    return ApplicationError(" ".join(exc.messages))


def _loosening_changes(before: McpServer, after: McpServer, changed: set[str]) -> list[str]:
    """The changes that make an already reviewed server run something else or reach further."""
    reasons = sorted(changed & LAUNCH_FIELDS)
    if "trust_tier" in changed and is_trust_increase(before.trust_tier, after.trust_tier):
        reasons.append("trust_tier")
    if "data_sensitivity" in changed and is_sensitivity_decrease(
        before.data_sensitivity, after.data_sensitivity
    ):
        reasons.append("data_sensitivity")
    if "isolation" in changed and after.isolation == "local":
        reasons.append("isolation")
    if "network_mode" in changed and NETWORK_STRICTNESS.index(
        NetworkMode(after.network_mode)
    ) > NETWORK_STRICTNESS.index(NetworkMode(before.network_mode)):
        reasons.append("network_mode")
    if "egress_allowlist" in changed and set(after.egress_allowlist) - set(before.egress_allowlist):
        reasons.append("egress_allowlist")
    if "storage" in changed and _storage_grows(before.storage, after.storage):
        reasons.append("storage")
    return reasons


def _storage_grows(before: Any, after: Any) -> bool:
    """More to keep than was reviewed: a new path, a larger size, a broader scope."""
    breadth = {"conversation": 0, "person": 1, "team": 2, "server": 3}
    old = {str(entry.get("path")): entry for entry in before or [] if isinstance(entry, dict)}
    for entry in after or []:
        known = old.get(str(entry.get("path")))
        if known is None or int(entry.get("size_mb", 0)) > int(known.get("size_mb", 0)):
            return True
        if breadth.get(str(entry.get("scope")), 3) > breadth.get(str(known.get("scope")), 3):
            return True
    return False


@transaction.atomic
def server_create(*, actor: Actor, **fields: Any) -> McpServer:
    unknown = set(fields) - SERVER_EDITABLE_FIELDS
    if unknown:
        raise ApplicationError(f"Unknown server fields: {', '.join(sorted(unknown))}.")
    server = McpServer(**fields)
    try:
        server.full_clean()
    except ValidationError as exc:
        raise _as_validation_application_error(exc) from exc
    _check_vouch(actor, None, server, set(fields))
    server.save()
    ServerStatus.objects.create(server=server)
    _discover_after_change(server, actor=actor, trigger="created")
    audit_record(
        actor=actor,
        action="server.created",
        target=server,
        server=server,
        summary=f"Registered {server.name} ({server.get_transport_display()}, "
        f"{server.get_trust_tier_display()} tier) as a draft.",
        after=_snapshot(server, sorted(fields)),
    )
    if server.package_lock:
        _audit_lock(actor, server, {}, server.package_lock)
    return server


def _audit_lock(
    actor: Actor, server: McpServer, before: Mapping[str, Any], after: Mapping[str, Any]
) -> None:
    """`server.dependencies_locked`: the whole set (name==version and hashes) and what moved."""

    def versions(lock: Mapping[str, Any]) -> dict[str, str]:
        return {str(p["name"]): str(p["version"]) for p in lock.get("packages", [])}

    old, new = versions(before), versions(after)
    moved = sorted(
        f"{name} {old[name]} -> {new[name]}"
        for name in old.keys() & new.keys()
        if old[name] != new[name]
    )
    audit_record(
        actor=actor,
        action="server.dependencies_locked" if after else "server.dependencies_unlocked",
        target=server,
        server=server,
        summary=f"{server.name}: dependencies "
        + (f"locked, {lock_summary(after)}." if after else "no longer locked."),
        details={
            "digest": after.get("digest", ""),
            "resolver": after.get("resolver", ""),
            "as_of": after.get("as_of", ""),
            "packages": [
                {"name": p["name"], "version": p["version"], "hashes": p.get("hashes", [])}
                for p in after.get("packages", [])
            ],
            "added": sorted(f"{n} {new[n]}" for n in new.keys() - old.keys()),
            "removed": sorted(f"{n} {old[n]}" for n in old.keys() - new.keys()),
            "moved": moved,
        },
    )


@transaction.atomic
def server_update(*, actor: Actor, server: McpServer, changes: Mapping[str, Any]) -> McpServer:
    """Apply `changes` (field -> new value). A loosening change to a reviewed server sends it
    back to review."""
    unknown = set(changes) - SERVER_EDITABLE_FIELDS
    if unknown:
        raise ApplicationError(
            f"These server fields cannot be edited: {', '.join(sorted(unknown))}."
        )
    # of=self: PostgreSQL cannot lock the nullable side of the outer join to the category.
    locked = (
        McpServer.objects.select_for_update(of=("self",))
        .select_related("category")
        .get(pk=server.pk)
    )
    original = McpServer.objects.select_related("category").get(pk=server.pk)
    for name, value in changes.items():
        setattr(locked, name, value)
    tightened = _ratchet_network_to_sensitivity(locked, changes)
    retargeted = secrets_drop_on_retarget(original, locked, changes)
    try:
        locked.full_clean()
    except ValidationError as exc:
        raise _as_validation_application_error(exc) from exc

    changed = {
        name
        for name in {*changes, *tightened, *SECRET_FIELDS}
        if _raw(original, name) != _raw(locked, name)
    }
    if not changed:
        return locked
    _check_vouch(actor, original, locked, changed)
    update_fields = set(changed)
    loosened = (
        _loosening_changes(original, locked, changed)
        if original.review_status in REVIEWED_STATUSES
        else []
    )
    if loosened:
        locked.review_status = ReviewStatus.PENDING_REVIEW
        locked.review_note = f"Sent back to review after changes to {', '.join(loosened)}."
        update_fields |= {"review_status", "review_note"}
    locked.save(update_fields=[*update_fields, "updated_at", "isolation"])
    if "trust_tier" in changed:
        _tools_rederive_permission_class(locked)
        announce_visibility_change(server_ids=[locked.pk], reason="server.tier_changed")
    if changed & LAUNCH_FIELDS:
        _discover_after_change(locked, actor=actor, trigger="launch changed")
    if changed & EGRESS_FIELDS:
        _sandbox_egress_clean_on_commit(original.slug, locked.slug)
    if changed & RUNTIME_FIELDS:
        # A warm runtime runs the old spec: a new session (a new container, in the stricter
        # network mode where that is what changed) takes its place.
        runtime_restart_if_held(server=locked)
    audit_record(
        actor=actor,
        action="server.updated",
        target=locked,
        server=locked,
        summary=f"Changed {', '.join(sorted(changed))} of {locked.name}."
        + (
            f" Its network was tightened to {locked.network_mode} for "
            f"{locked.get_data_sensitivity_display().lower()} data."
            if tightened
            else ""
        )
        + (f" It goes back to review ({', '.join(loosened)} loosened)." if loosened else "")
        + (
            f" Its stored secrets were dropped because its {', '.join(retargeted)} changed; "
            "enter them again."
            if retargeted
            else ""
        ),
        before=_snapshot(original, sorted(changed)),
        after=_snapshot(locked, sorted(changed)),
        details={
            **({"back_to_review": loosened} if loosened else {}),
            **({"secrets_dropped_after": retargeted} if retargeted else {}),
        },
    )
    if "package_lock" in changed:
        _audit_lock(actor, locked, original.package_lock or {}, locked.package_lock or {})
    if changed & CATALOGUE_FIELDS and not loosened:
        announce_visibility_change(server_ids=[locked.pk], reason="server.updated")
    if loosened:
        announce_visibility_change(server_ids=[locked.pk], reason="server.sent_back_to_review")
        audit_record(
            actor=actor,
            action="server.sent_back_to_review",
            target=locked,
            server=locked,
            summary=f"{locked.name} needs a new review: {', '.join(loosened)} changed.",
            before={"review_status": original.review_status},
            after={"review_status": locked.review_status},
        )
    return locked


def _tools_rederive_permission_class(server: McpServer) -> None:
    """A tier change changes whether the server's own read-only hints are believed."""
    tools = list(Tool.objects.filter(server=server))
    for tool in tools:
        tool.permission_class_derived = derive_permission_class(
            tool.annotations or {}, trust_tier=server.trust_tier
        )
        tool.permission_class = tool.permission_class_override or tool.permission_class_derived
    Tool.objects.bulk_update(tools, ["permission_class_derived", "permission_class"])


def _launched_program(server: McpServer) -> tuple[Any, ...]:
    """What a stdio server runs, without the version a launcher pins: `npx -y pkg ARGS` and the
    same package stored as a reference with `npx -y pkg@1.2.3 ARGS` run the same program with
    the same arguments, so pinning (an import, `adopt_launchers`) does not point it elsewhere."""
    argv = list(server.command or [])
    try:
        launcher = launcher_parse(argv)
    except LauncherError:
        launcher = None
    if launcher is None:
        return (
            "argv",
            tuple(argv),
            server.image,
            server.package_registry,
            server.package_identifier,
        )
    # Stored references that disagree with the command are part of what runs.
    stray_package = (
        (server.package_registry, server.package_identifier)
        if server.package_identifier not in ("", launcher.identifier)
        or server.package_registry not in ("", launcher.registry)
        else ()
    )
    stray_image = (
        server.image
        if server.image and server.image.split("@")[0].rsplit(":", 1)[0] != launcher.identifier
        else ""
    )
    return (
        "launcher",
        launcher.registry,
        launcher.identifier,
        launcher.program,
        launcher.arguments,
        tuple(sorted(launcher.env)),
        stray_package,
        stray_image,
    )


def _retarget_reasons(before: McpServer, after: McpServer) -> list[str]:
    """What changed about where a server's stored secrets would be sent or who would read them."""
    reasons = [name for name in ("transport",) if getattr(before, name) != getattr(after, name)]
    if not reasons and _launched_program(before) != _launched_program(after):
        reasons += [
            name
            for name in ("command", "image", "package_registry", "package_identifier")
            if getattr(before, name) != getattr(after, name)
        ]
    if before.url != after.url and _origin(before.url) != _origin(after.url):
        reasons.append("URL host")
    return reasons


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url or "")
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def secrets_drop_on_retarget(
    before: McpServer, after: McpServer, changes: Mapping[str, Any]
) -> list[str]:
    """Pointing a server somewhere else (another URL host, command, image) must not carry its
    stored secrets along: someone who may edit a server but only sees masked values would
    otherwise send them to a host of their own or print them. Values typed anew in the same
    change are kept; every other value is emptied, its name kept so an admin sees what to enter
    again. Returns what changed (empty: nothing was dropped)."""
    reasons = _retarget_reasons(before, after)
    if not reasons:
        return []
    dropped = False
    for name in sorted(SECRET_FIELDS):
        stored: dict[str, str] = getattr(before, name) or {}
        given: dict[str, str] = changes.get(name, stored) or {}
        kept = {
            key: ("" if key in stored and stored[key] == value else value)
            for key, value in given.items()
        }
        if any(stored.get(key) and not kept[key] for key in kept):
            dropped = True
        setattr(after, name, kept)
    return reasons if dropped else []


def _ratchet_network_to_sensitivity(
    server: McpServer, changes: Mapping[str, Any]
) -> dict[str, Any]:
    """Raising the data sensitivity tightens the network at once, without a new review: the
    network mode drops to the loosest one the new sensitivity allows (secret: none,
    confidential: proxied at most). An edit that sets the network mode itself is validated as
    it is."""
    if "data_sensitivity" not in changes or "network_mode" in changes:
        return {}
    allowed = allowed_network_modes(server.trust_tier, server.data_sensitivity)
    if not allowed or server.network_mode in allowed:
        return {}
    tightened: dict[str, Any] = {"network_mode": allowed[-1]}
    if allowed[-1] != NetworkMode.PROXIED:
        tightened["egress_allowlist"] = []
    for name, value in tightened.items():
        setattr(server, name, value)
    return tightened


def _sandbox_egress_clean_on_commit(*slugs: str) -> None:
    """A server's kept proxied network (workers/adapters/sandbox/egress_pool.py) may no longer
    fit: once the change is committed, a worker removes what does not (a network a session is
    still on stays until its process drops it)."""
    servers = sorted(set(slugs))
    transaction.on_commit(
        lambda: task_queue.send_now(task_queue.SANDBOX_EGRESS_CLEAN, args=[servers], expires=3600),
        robust=True,
    )


def _discover_after_change(server: McpServer, *, actor: Actor, trigger: str) -> None:
    """What a server offers may have changed: have the workers look (after commit)."""
    discovery_request(server=server, actor=actor, trigger=trigger)


def _raw(server: McpServer, name: str) -> Any:
    if name == "category":
        return server.category_id
    return getattr(server, name)
