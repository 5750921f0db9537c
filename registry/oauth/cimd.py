"""Client ID Metadata Documents, fetched through Toolroom's network guard.

More: docs/authentication.md, "Module notes".
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

import urllib3
from django.conf import settings
from django.core.cache import cache
from oauth2_provider.cimd import (
    CIMDError,
    SafeMetadataFetcher,
    _build_application_kwargs,
    _validate_client_id_url,
    is_cimd_client_id,
)
from oauth2_provider.settings import oauth2_settings

from registry.core.netguard import UnsafeUrlError, check_resolved_address, check_server_url


def is_metadata_document_url(client_id: str) -> bool:
    return bool(client_id) and is_cimd_client_id(client_id)


def _problem_key(client_id: str) -> str:
    return "oauth-cimd-problem:" + hashlib.sha256(client_id.encode()).hexdigest()


def metadata_document_problem_record(client_id: str, problem: str) -> None:
    cache.set(_problem_key(client_id), problem, oauth2_settings.CIMD_FAILURE_BACKOFF_SECONDS)


def metadata_document_problem(client_id: str) -> str:
    """Why the document at `client_id` was last refused (within the toolkit's back-off)."""
    return str(cache.get(_problem_key(client_id)) or "")


class GuardedMetadataFetcher(SafeMetadataFetcher):
    """The toolkit's CIMD_METADATA_FETCHER."""

    def fetch(self, client_id: str) -> tuple[dict[str, Any], int]:
        try:
            metadata, max_age = self._fetch(client_id)
            # Checked here as well as by the toolkit, so that the refusal says why.
            if metadata.get("client_id") != client_id:
                raise CIMDError(
                    f"the document names another client_id ({str(metadata.get('client_id'))[:200]})"
                )
            _build_application_kwargs(metadata)
        except CIMDError as exc:
            metadata_document_problem_record(client_id, str(exc))
            raise
        return metadata, max_age

    def _fetch(self, client_id: str) -> tuple[dict[str, Any], int]:
        parsed = _validate_client_id_url(client_id)
        allowed = settings.TOOLROOM_ALLOWED_NETWORKS
        try:
            check_server_url(client_id, allowed_networks=allowed)
        except UnsafeUrlError as exc:
            raise CIMDError(f"its address is refused: {exc}") from exc
        host = parsed.hostname or ""
        port = parsed.port or 443
        try:
            infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
        except socket.gaierror as exc:
            raise CIMDError(f"its host {host} does not resolve ({exc})") from exc
        addresses = []
        for info in infos:
            address = str(info[4][0])
            try:
                check_resolved_address(address, allowed_networks=allowed)
            except UnsafeUrlError as exc:
                raise CIMDError(f"it is on a private network: {exc}") from exc
            addresses.append(address)
        timeout = oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS
        deadline = time.monotonic() + timeout
        context = ssl.create_default_context(cafile=settings.TOOLROOM_OAUTH_CIMD_CA_BUNDLE or None)
        path = urlsplit(client_id).path + (f"?{parsed.query}" if parsed.query else "")
        headers = {"Host": parsed.netloc, "Accept": "application/json, application/*+json"}
        failure: Exception | None = None
        for address in addresses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            pool = urllib3.HTTPSConnectionPool(
                host=address,
                port=port,
                timeout=urllib3.Timeout(connect=remaining, read=remaining, total=remaining),
                retries=False,
                maxsize=1,
                ssl_context=context,
                server_hostname=host,
                assert_hostname=host,
            )
            try:
                response = pool.urlopen(
                    "GET", path, headers=headers, redirect=False, preload_content=False
                )
                try:
                    document: tuple[dict[str, Any], int] = self._read_document(response)
                    return document
                finally:
                    response.release_conn()
            except urllib3.exceptions.HTTPError as exc:
                failure = exc
            finally:
                pool.close()
        raise CIMDError(f"it could not be fetched ({failure})")
