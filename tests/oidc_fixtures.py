"""A real OpenID Connect provider for the portal's sign-in tests: panva's `oidc-provider` (npm),
run by Node.js from tests/oidc_provider/ (installed by scripts/ensure-oidc-provider, which
`make test` runs), with its own development sign-in pages. Not a mock: Toolroom fetches its
tokens, checks the ID token's signature against its JWKS and reads its UserInfo endpoint."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from urllib.parse import urljoin

import httpx2
import pytest

from tests.mcp_fixtures import free_port, wait_for_port

PROVIDER_DIR = Path(__file__).parent / "oidc_provider"
CLIENT_ID = "toolroom"
CLIENT_SECRET = "a-test-client-secret-of-some-length"

# The people the provider knows, with the teams claim the portal maps (prefix `toolroom-`).
ACCOUNTS = {
    "carol": {
        "email": "carol@example.com",
        "name": "Carol Jones",
        "groups": ["toolroom-alpha", "toolroom-beta:owner", "payroll-admins"],
    },
    "mallory": {"email": "mallory@example.com", "name": "Mallory", "groups": []},
    # Groups anyone at the provider could have made, named like teams but without the prefix.
    "trudy": {"email": "trudy@example.com", "name": "Trudy", "groups": ["alpha", "beta:owner"]},
    "admin": {"email": "intruder@example.com", "name": "Not The Admin", "groups": []},
}


@dataclass(frozen=True)
class OidcProvider:
    issuer: str
    port: int

    def django_settings(self) -> dict[str, object]:
        return {
            "OIDC_RP_CLIENT_ID": CLIENT_ID,
            "OIDC_RP_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{self.issuer}/auth",
            "OIDC_OP_TOKEN_ENDPOINT": f"{self.issuer}/token",
            "OIDC_OP_USER_ENDPOINT": f"{self.issuer}/me",
            "OIDC_OP_JWKS_ENDPOINT": f"{self.issuer}/jwks",
            "OIDC_RP_SIGN_ALGO": "RS256",
            "OIDC_RP_SCOPES": "openid email profile groups",
            "TOOLROOM_OIDC_TEAMS_CLAIM": "groups",
            "TOOLROOM_OIDC_TEAM_PREFIX": "toolroom-",
            "TOOLROOM_OIDC_OWNER_SUFFIX": ":owner",
        }


def start_oidc_provider(redirect_uris: list[str]) -> tuple[subprocess.Popen[bytes], OidcProvider]:
    node = shutil.which("node")
    if node is None or not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.fail(
            "The tests' OpenID Connect provider is not installed: run scripts/ensure-oidc-provider "
            "(make test does)."
        )
    port = free_port()
    env = {
        **os.environ,
        "OIDC_PORT": str(port),
        "OIDC_CLIENT_ID": CLIENT_ID,
        "OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_REDIRECT_URIS": ",".join(redirect_uris),
        "OIDC_ACCOUNTS": json.dumps(ACCOUNTS),
    }
    process = subprocess.Popen(
        [node, "server.mjs"],
        cwd=PROVIDER_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=20)
    except RuntimeError:
        process.kill()
        process.wait()
        raise
    return process, OidcProvider(issuer=f"http://127.0.0.1:{port}", port=port)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def oidc_provider() -> Iterator[OidcProvider]:
    """The provider, for the Django test client (callback on http://testserver)."""
    process, provider = start_oidc_provider(["http://testserver/portal/oidc/callback/"])
    yield provider
    stop(process)


def _form_action(page: str, base: str) -> str:
    match = re.search(r'<form[^>]*action="([^"]+)"', page)
    assert match, f"no form on the provider's page: {page[:500]}"
    return urljoin(base, unescape(match.group(1)))


def sign_in_at_provider(authorize_url: str, login: str) -> str:
    """Go through the provider's own sign-in and consent pages as a browser would; return the
    URL it sends the browser back to (Toolroom's callback with `code` and `state`). The provider's
    development sign-in takes any password for the login it is given."""
    with httpx2.Client(follow_redirects=False, timeout=10) as browser:
        url = authorize_url
        for _ in range(12):
            answer = browser.get(url)
            if answer.status_code in (302, 303):
                url = urljoin(url, answer.headers["location"])
                if "/portal/oidc/callback/" in url:
                    return url
                continue
            page = answer.text
            action = _form_action(page, url)
            if 'name="login"' in page:
                answer = browser.post(
                    action, data={"prompt": "login", "login": login, "password": "any"}
                )
            else:  # the consent page
                answer = browser.post(action, data={"prompt": "consent"})
            assert answer.status_code in (302, 303), answer.text[:500]
            url = urljoin(action, answer.headers["location"])
            if "/portal/oidc/callback/" in url:
                return url
    raise AssertionError("the provider never sent the browser back to Toolroom")
