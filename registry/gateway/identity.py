"""The caller's identity, pre-bound, for servers whose gateway policy asks for it: a short-lived
JWT signed by Toolroom (ES256), with the public keys at `/.well-known/jwks.json`.

Claims: `iss` (Toolroom), `aud` (the server: `toolroom:server:<slug>`), `sub` (the agent token),
`team`, `agent`, `role`, `tool`, `iat`, `exp` (at most 60 s later), `jti`. The agent's own token
never goes upstream; a server that verifies this token knows who calls and cannot be told
otherwise by the arguments.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

ISSUER = "toolroom"
LIFETIME_SECONDS = 60
ALGORITHM = "ES256"
_lock = threading.Lock()


def server_audience(slug: str) -> str:
    return f"toolroom:server:{slug}"


def _b64(number: int) -> str:
    raw = number.to_bytes(32, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _load_or_make() -> ec.EllipticCurvePrivateKey:
    pem = settings.TOOLROOM_IDENTITY_KEY
    if not pem and settings.TOOLROOM_IDENTITY_KEY_PATH:
        path = Path(settings.TOOLROOM_IDENTITY_KEY_PATH)
        with _lock:
            if not path.exists():
                key = ec.generate_private_key(ec.SECP256R1())
                data = key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
                path.parent.mkdir(parents=True, exist_ok=True)
                temporary = path.with_suffix(f".{os.getpid()}.tmp")
                temporary.touch(mode=0o600)
                temporary.write_bytes(data)
                try:
                    os.link(temporary, path)  # the first process to make one wins
                except FileExistsError:
                    pass
                finally:
                    temporary.unlink()
        pem = path.read_text()
    if not pem:
        raise ImproperlyConfigured(
            "TOOLROOM_IDENTITY_KEY (or TOOLROOM_IDENTITY_KEY_FILE) is needed to pass callers' "
            "identity to servers."
        )
    loaded = serialization.load_pem_private_key(pem.encode(), password=None)
    if not isinstance(loaded, ec.EllipticCurvePrivateKey):
        raise ImproperlyConfigured("TOOLROOM_IDENTITY_KEY must be an EC P-256 private key.")
    return loaded


@cache
def _signing_key(config: tuple[str, str]) -> tuple[ec.EllipticCurvePrivateKey, dict[str, str]]:
    key = _load_or_make()
    numbers = key.public_key().public_numbers()
    public = {"kty": "EC", "crv": "P-256", "x": _b64(numbers.x), "y": _b64(numbers.y)}
    thumbprint = hashlib.sha256(
        json.dumps(public, sort_keys=True, separators=(",", ":")).encode()
    ).digest()
    kid = base64.urlsafe_b64encode(thumbprint).rstrip(b"=").decode()
    return key, {**public, "kid": kid, "use": "sig", "alg": ALGORITHM}


def _key() -> tuple[ec.EllipticCurvePrivateKey, dict[str, str]]:
    return _signing_key((settings.TOOLROOM_IDENTITY_KEY, settings.TOOLROOM_IDENTITY_KEY_PATH))


def identity_jwks() -> dict[str, Any]:
    """The public keys servers verify identity tokens with."""
    return {"keys": [_key()[1]]}


def identity_token(
    *,
    token_id: int,
    agent: str,
    team_id: int,
    team_slug: str,
    role: str,
    tool: str,
    server_slug: str,
    now: float | None = None,
    person: str = "",
    client: str = "",
) -> str:
    """A signed identity token for one call of `tool` on the server `server_slug`. For a person
    (an OAuth client acting for them) `sub` names the person and `client` the app; `agent` is
    then the app too."""
    key, public = _key()
    issued = int(now if now is not None else time.time())
    claims = {
        "iss": ISSUER,
        "aud": server_audience(server_slug),
        "sub": f"person:{person}" if person else f"agent-token:{token_id}",
        "agent": agent,
        "team": team_slug,
        "team_id": team_id,
        "role": role,
        "tool": tool,
        "iat": issued,
        "exp": issued + LIFETIME_SECONDS,
        "jti": secrets.token_urlsafe(12),
    }
    if person:
        claims["person"] = person
        claims["client"] = client
    return jwt.encode(claims, key, algorithm=ALGORITHM, headers={"kid": public["kid"]})
