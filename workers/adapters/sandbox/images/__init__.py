"""Images the sandbox runs: a local Debian base, package images built offline, the egress proxy.

More: docs/sandbox.md, "Module notes".
"""

from workers.adapters.sandbox.images.base import (
    BASE_IMAGE,
    DEBIAN_SUITE,
    NODE_BASE_IMAGE,
    NODE_VERSION,
    apt_mirror,
    build_base_image,
    trim_rootfs,
)
from workers.adapters.sandbox.images.build import (
    LABEL_COMMANDS,
    LABEL_INPUTS,
    LABEL_NODE_VERSION,
    RECIPE_VERSION,
    ImageRef,
    Say,
    image_digest,
)
from workers.adapters.sandbox.images.packages import PackageRegistry, build_package_image
from workers.adapters.sandbox.images.proxy import (
    PROXY_REPOSITORY,
    build_proxy_image,
    proxy_image_reference,
)
from workers.adapters.sandbox.images.pypi import (
    BASE_PYTHON,
    build_python_image,
    fetch_wheels,
    image_python_version,
)

__all__ = [
    "BASE_IMAGE",
    "BASE_PYTHON",
    "DEBIAN_SUITE",
    "LABEL_COMMANDS",
    "LABEL_INPUTS",
    "LABEL_NODE_VERSION",
    "NODE_BASE_IMAGE",
    "NODE_VERSION",
    "PROXY_REPOSITORY",
    "RECIPE_VERSION",
    "ImageRef",
    "PackageRegistry",
    "Say",
    "apt_mirror",
    "build_base_image",
    "build_package_image",
    "build_proxy_image",
    "build_python_image",
    "fetch_wheels",
    "image_digest",
    "image_python_version",
    "proxy_image_reference",
    "trim_rootfs",
]
