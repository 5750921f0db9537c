"""Images the sandbox runs: a local Debian base, package images built offline, the egress proxy.

No registry is needed. The base image is a Debian root filesystem made with debootstrap from the
mirror in apt's own sources and imported into the engine. Package images install a pinned PyPI or
npm package from files fetched on the worker host (wheels, npm tarballs), with no network inside the
build. Each image's tag is a hash of everything that went into it (the recipe, the base image's ID,
the package and version, the files), so the same inputs reuse the image and a changed input, or a
rebuilt base, makes a new one. The engine's image ID is the digest recorded for a server.

Modules: `build` (what every build shares), `base` (the Debian and Node bases), `pypi` and `npm`
(server images of packages), `packages` (one pinned package from either), `proxy` (the egress
proxy's image).
"""

from workers.adapters.sandbox.images.base import (
    BASE_IMAGE,
    DEBIAN_SUITE,
    NODE_BASE_IMAGE,
    NODE_VERSION,
    apt_mirror,
    build_base_image,
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
from workers.adapters.sandbox.images.pypi import BASE_PYTHON, build_python_image

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
    "image_digest",
    "proxy_image_reference",
]
