"""MCP servers, their tools (with every definition ever seen), approvals pinned to a definition
hash, resources, prompts, and the runtime status the workers keep.

Rules about a row's own data live in `clean()`; state changes go through `services`.
"""

from registry.servers.models.servers import (
    PER_PERSON_MODES,
    Category,
    HealthCheckMethod,
    McpServer,
    PackageRegistry,
    RestartPolicy,
    ReviewStatus,
    Transport,
    UpstreamAuth,
)
from registry.servers.models.status import (
    CircuitState,
    DiscoveryRun,
    DiscoveryStatus,
    Health,
    HealthSample,
    RuntimeState,
    SandboxPreparation,
    SandboxPreparationState,
    ServerStatus,
)
from registry.servers.models.tools import (
    ApprovalEndReason,
    ApprovalState,
    ItemReview,
    PermissionClass,
    ServerPrompt,
    ServerResource,
    Tool,
    ToolApproval,
    ToolRevision,
)
from registry.servers.models.volumes import (
    StorageSeed,
    StorageVolume,
)

__all__ = [
    "PER_PERSON_MODES",
    "ApprovalEndReason",
    "ApprovalState",
    "Category",
    "CircuitState",
    "DiscoveryRun",
    "DiscoveryStatus",
    "Health",
    "HealthCheckMethod",
    "HealthSample",
    "ItemReview",
    "McpServer",
    "PackageRegistry",
    "PermissionClass",
    "RestartPolicy",
    "ReviewStatus",
    "RuntimeState",
    "SandboxPreparation",
    "SandboxPreparationState",
    "ServerPrompt",
    "ServerResource",
    "ServerStatus",
    "StorageSeed",
    "StorageVolume",
    "Tool",
    "ToolApproval",
    "ToolRevision",
    "Transport",
    "UpstreamAuth",
]
