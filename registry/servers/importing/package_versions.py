"""Asking PyPI and the npm registry which version of a package they serve as the newest one.

Imports pin a package that a launcher command names without a version (`npx -y pkg`, `uvx pkg`)
to what the registry serves at that moment, so that what was reviewed is what runs. The answer
is kept for a minute per process, so an import that names one package many times asks once.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx2
from django.conf import settings

from registry.core.errors import ApplicationError
from registry.core.process_cache import VersionedCache

LOOKUP_TIMEOUT_SECONDS = 15.0
CACHE_SECONDS = 60.0

_cache: VersionedCache[tuple[str, str], str] = VersionedCache("package versions", limit=1024)


class PackageLookupError(ApplicationError):
    """The registry does not know the package, or could not be asked."""


def _registry_url(registry: str, identifier: str) -> tuple[str, str]:
    if registry == "pypi":
        return "PyPI", f"{settings.TOOLROOM_PYPI_URL}/pypi/{quote(identifier, safe='')}/json"
    if registry == "npm":
        # A scoped name keeps its @ and has its / encoded, as the registry expects.
        name = quote(identifier, safe="@")
        return "the npm registry", f"{settings.TOOLROOM_NPM_REGISTRY_URL}/{name}"
    raise ValueError(f"No version lookup for the {registry!r} registry.")


def package_newest_version(*, registry: str, identifier: str) -> str:
    """The newest version `registry` ("pypi" or "npm") serves for `identifier` (its `latest`).

    Raises PackageLookupError naming the registry when the package does not exist there or
    the registry cannot be reached.
    """
    key = (registry, identifier.lower())
    cached = _cache.get(key)
    if cached is not None:
        return cached
    where, url = _registry_url(registry, identifier)
    headers = {"Accept": "application/vnd.npm.install-v1+json"} if registry == "npm" else {}
    try:
        response = httpx2.get(
            url, headers=headers, timeout=LOOKUP_TIMEOUT_SECONDS, follow_redirects=True
        )
    except httpx2.HTTPError as exc:
        raise PackageLookupError(
            f"{where} could not be asked for the newest version of {identifier} ({exc}); give "
            "an exact version instead."
        ) from exc
    if response.status_code == 404:
        raise PackageLookupError(f"{where} has no package named {identifier}.")
    if response.status_code != 200:
        raise PackageLookupError(
            f"{where} answered {response.status_code} when asked for {identifier}; give an "
            "exact version instead."
        )
    try:
        data = response.json()
        if registry == "pypi":
            version = data["info"]["version"]
        else:
            version = data["dist-tags"].get("latest", "")
    except (ValueError, KeyError, TypeError) as exc:
        raise PackageLookupError(
            f"{where} gave no newest version for {identifier}; give an exact version instead."
        ) from exc
    if not isinstance(version, str) or not version:
        raise PackageLookupError(f"{where} serves no version of {identifier}.")
    _cache.put(key, version, ttl=CACHE_SECONDS)
    return version
