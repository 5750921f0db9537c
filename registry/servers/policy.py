"""The trust-tier policy table: what each tier may run as, reach, consume, and what review it needs.

A server gets its tier's defaults when it is created. An admin may make a server's policy stricter
than the tier allows (sandbox a builtin server, give it no network, lower its limits) but never
looser: `policy_violations` names every field that goes past the tier, and the model refuses to
save such a server. Data sensitivity caps the network further: secret -> none, confidential ->
proxied at most.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db import models


class TrustTier(models.TextChoices):
    BUILTIN = "builtin", "Builtin"
    VERIFIED = "verified", "Verified"
    COMMUNITY = "community", "Community"
    UNTRUSTED = "untrusted", "Untrusted"


# Least trusted first: moving a server to a later tier loosens its policy.
TIER_TRUST_ORDER = [TrustTier.UNTRUSTED, TrustTier.COMMUNITY, TrustTier.VERIFIED, TrustTier.BUILTIN]


class Isolation(models.TextChoices):
    SANDBOX = "sandbox", "Sandboxed container"
    LOCAL = "local", "Local process"


class NetworkMode(models.TextChoices):
    NONE = "none", "None"
    INTERNAL = "internal", "Internal only"
    PROXIED = "proxied", "Egress through the allowlisting proxy"
    BRIDGE = "bridge", "Bridge (unrestricted egress)"


# Strictest first.
NETWORK_STRICTNESS = [
    NetworkMode.NONE,
    NetworkMode.INTERNAL,
    NetworkMode.PROXIED,
    NetworkMode.BRIDGE,
]


class DataSensitivity(models.TextChoices):
    PUBLIC = "public", "Public"
    INTERNAL = "internal", "Internal"
    CONFIDENTIAL = "confidential", "Confidential"
    SECRET = "secret", "Secret"


SENSITIVITY_ORDER = [
    DataSensitivity.PUBLIC,
    DataSensitivity.INTERNAL,
    DataSensitivity.CONFIDENTIAL,
    DataSensitivity.SECRET,
]

# The loosest network a server handling such data may have.
SENSITIVITY_NETWORK_CEILING = {
    DataSensitivity.PUBLIC: NetworkMode.BRIDGE,
    DataSensitivity.INTERNAL: NetworkMode.BRIDGE,
    DataSensitivity.CONFIDENTIAL: NetworkMode.PROXIED,
    DataSensitivity.SECRET: NetworkMode.NONE,
}


@dataclass(frozen=True)
class TierPolicy:
    tier: TrustTier
    isolations: tuple[Isolation, ...]  # allowed; the first is the default
    network_modes: tuple[NetworkMode, ...]  # allowed
    max_memory_mb: int
    max_cpus: Decimal
    max_pids: int
    approval_note_required: bool
    vetting_report_required: bool
    summary: str

    @property
    def default_isolation(self) -> Isolation:
        return self.isolations[0]


TIER_POLICIES: dict[str, TierPolicy] = {
    TrustTier.BUILTIN: TierPolicy(
        tier=TrustTier.BUILTIN,
        isolations=(Isolation.LOCAL, Isolation.SANDBOX),
        network_modes=tuple(NETWORK_STRICTNESS),
        max_memory_mb=4096,
        max_cpus=Decimal("2.0"),
        max_pids=1024,
        approval_note_required=False,
        vetting_report_required=False,
        summary="Installed and vouched for by the operators: may run as a local process.",
    ),
    TrustTier.VERIFIED: TierPolicy(
        tier=TrustTier.VERIFIED,
        isolations=(Isolation.SANDBOX, Isolation.LOCAL),
        network_modes=tuple(NETWORK_STRICTNESS),
        max_memory_mb=2048,
        max_cpus=Decimal("2.0"),
        max_pids=512,
        approval_note_required=False,
        vetting_report_required=False,
        summary="Reviewed publisher: sandboxed unless an admin explicitly allows a local process.",
    ),
    TrustTier.COMMUNITY: TierPolicy(
        tier=TrustTier.COMMUNITY,
        isolations=(Isolation.SANDBOX,),
        network_modes=(NetworkMode.NONE, NetworkMode.INTERNAL, NetworkMode.PROXIED),
        max_memory_mb=1024,
        max_cpus=Decimal("1.0"),
        max_pids=256,
        approval_note_required=True,
        vetting_report_required=False,
        summary="Published by others: always sandboxed, egress only through the proxy; approval "
        "needs a written note.",
    ),
    TrustTier.UNTRUSTED: TierPolicy(
        tier=TrustTier.UNTRUSTED,
        isolations=(Isolation.SANDBOX,),
        network_modes=(NetworkMode.NONE, NetworkMode.PROXIED),
        max_memory_mb=512,
        max_cpus=Decimal("0.5"),
        max_pids=128,
        approval_note_required=True,
        vetting_report_required=True,
        summary="Unknown origin: always sandboxed, no network but the proxy; approval needs a "
        "written note and a vetting report from a successful discovery.",
    ),
}


def tier_policy(tier: str) -> TierPolicy:
    return TIER_POLICIES[tier]


def is_trust_increase(old_tier: str, new_tier: str) -> bool:
    return TIER_TRUST_ORDER.index(TrustTier(new_tier)) > TIER_TRUST_ORDER.index(TrustTier(old_tier))


def is_sensitivity_decrease(old: str, new: str) -> bool:
    return SENSITIVITY_ORDER.index(DataSensitivity(new)) < SENSITIVITY_ORDER.index(
        DataSensitivity(old)
    )


def allowed_network_modes(tier: str, sensitivity: str) -> list[NetworkMode]:
    ceiling = NETWORK_STRICTNESS.index(SENSITIVITY_NETWORK_CEILING[DataSensitivity(sensitivity)])
    return [
        mode
        for mode in tier_policy(tier).network_modes
        if NETWORK_STRICTNESS.index(mode) <= ceiling
    ]


def policy_violations(
    *,
    tier: str,
    sensitivity: str,
    isolation: str,
    network_mode: str,
    memory_limit_mb: int | None,
    cpu_limit: Decimal | None,
    pids_limit: int | None,
) -> dict[str, str]:
    """Map each field that is looser than the tier (or the data sensitivity) allows to why."""
    policy = tier_policy(tier)
    label = TrustTier(tier).label
    problems: dict[str, str] = {}
    if isolation not in policy.isolations:
        problems["isolation"] = (
            f"The {label} tier requires a sandboxed container; an admin may make a server's "
            "policy stricter than its tier, never looser."
        )
    allowed_modes = allowed_network_modes(tier, sensitivity)
    if network_mode not in allowed_modes:
        why = (
            f"{DataSensitivity(sensitivity).label} data"
            if network_mode in policy.network_modes
            else f"the {label} tier"
        )
        problems["network_mode"] = (
            f"Network '{network_mode}' is looser than {why} allows; allowed: "
            f"{', '.join(allowed_modes)}."
        )
    if memory_limit_mb is not None and memory_limit_mb > policy.max_memory_mb:
        problems["memory_limit_mb"] = (
            f"The {label} tier allows at most {policy.max_memory_mb} MB of memory."
        )
    if cpu_limit is not None and cpu_limit > policy.max_cpus:
        problems["cpu_limit"] = f"The {label} tier allows at most {policy.max_cpus} CPUs."
    if pids_limit is not None and pids_limit > policy.max_pids:
        problems["pids_limit"] = f"The {label} tier allows at most {policy.max_pids} processes."
    return problems
