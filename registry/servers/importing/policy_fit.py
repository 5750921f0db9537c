"""Tightening an imported server's policy to what the tier being set allows, with a warning each."""

from __future__ import annotations

from typing import Any

from registry.servers.models import McpServer
from registry.servers.policy import (
    NetworkMode,
    TrustTier,
    allowed_network_modes,
    tier_policy,
)


def fit_policy(
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
    tier_changed = base.pk is not None and tier != base.trust_tier
    if tier_changed and "isolation" not in values and isolation != policy.default_isolation:
        # A re-import that gives a new tier (`--tier builtin` for a program on this host) gets
        # that tier's isolation, as a new server would, unless the file sets one.
        values["isolation"] = isolation = policy.default_isolation
        warnings.append(
            f"Isolation becomes {policy.default_isolation}, the {label} tier's default (the "
            "file does not set it)."
        )
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
