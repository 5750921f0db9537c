"""Run MCP servers in hardened Docker containers and talk MCP to them over the container's stdio.

The public interface; see docs/sandbox.md for the design.
"""

from workers.adapters.sandbox.egress_pool import (
    EGRESS_POOL,
    EgressPool,
    egress_policy,
)
from workers.adapters.sandbox.egress_sweep import remove_stale_egress
from workers.adapters.sandbox.engine import connect_engine, engine_version
from workers.adapters.sandbox.errors import (
    ContainerFate,
    EngineUnavailableError,
    ImageBuildError,
    SandboxError,
    SandboxSpecError,
)
from workers.adapters.sandbox.images import (
    BASE_IMAGE,
    NODE_BASE_IMAGE,
    ImageRef,
    build_base_image,
    build_package_image,
    build_proxy_image,
    build_python_image,
    image_digest,
)
from workers.adapters.sandbox.janitor import (
    SandboxStatus,
    remove_orphans,
    remove_surplus_egress_networks,
    sandbox_status,
)
from workers.adapters.sandbox.pruning import PrunedImage, PruneReport, prune_server_images
from workers.adapters.sandbox.spec import NETWORK_MODES, ContainerSpec, HostMount, NetworkMode
from workers.adapters.sandbox.transport import SandboxTransport, sandbox_transport

__all__ = [
    "BASE_IMAGE",
    "EGRESS_POOL",
    "NETWORK_MODES",
    "NODE_BASE_IMAGE",
    "ContainerFate",
    "ContainerSpec",
    "EgressPool",
    "EngineUnavailableError",
    "HostMount",
    "ImageBuildError",
    "ImageRef",
    "NetworkMode",
    "PruneReport",
    "PrunedImage",
    "SandboxError",
    "SandboxSpecError",
    "SandboxStatus",
    "SandboxTransport",
    "build_base_image",
    "build_package_image",
    "build_proxy_image",
    "build_python_image",
    "connect_engine",
    "egress_policy",
    "engine_version",
    "image_digest",
    "prune_server_images",
    "remove_orphans",
    "remove_stale_egress",
    "remove_surplus_egress_networks",
    "sandbox_status",
    "sandbox_transport",
]
