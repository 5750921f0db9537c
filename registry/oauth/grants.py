"""The oauthlib server Toolroom's authorization server runs: the authorization code grant with
PKCE S256 only, refresh tokens, revocation; nothing else (no implicit, password or client
credentials grant, no device flow).

`plain` PKCE is not only left out of the metadata: a request using it (or naming no method, which
RFC 7636 reads as `plain`) is refused when it arrives, before the person is asked anything.
"""

from __future__ import annotations

from typing import Any

from oauthlib.oauth2 import RequestValidator
from oauthlib.oauth2.rfc6749 import errors
from oauthlib.oauth2.rfc6749.endpoints import (
    AuthorizationEndpoint,
    ResourceEndpoint,
    RevocationEndpoint,
    TokenEndpoint,
)
from oauthlib.oauth2.rfc6749.grant_types import AuthorizationCodeGrant, RefreshTokenGrant
from oauthlib.oauth2.rfc6749.grant_types.authorization_code import code_challenge_method_s256
from oauthlib.oauth2.rfc6749.tokens import BearerToken


class S256AuthorizationCodeGrant(AuthorizationCodeGrant):
    """The authorization code grant, PKCE with S256 only; a wrong verifier is named as such."""

    _code_challenge_methods = {"S256": code_challenge_method_s256}

    def validate_code_challenge(self, challenge: str, challenge_method: str, verifier: str) -> bool:
        if challenge_method in self._code_challenge_methods and self._code_challenge_methods[
            challenge_method
        ](verifier, challenge):
            return True
        raise errors.InvalidGrantError(
            description="The PKCE code_verifier does not match the code_challenge sent with the "
            "authorization request."
        )


class ToolroomOAuthServer(
    AuthorizationEndpoint, TokenEndpoint, ResourceEndpoint, RevocationEndpoint
):
    """The toolkit's OAUTH2_SERVER_CLASS."""

    def __init__(
        self,
        request_validator: RequestValidator,
        token_expires_in: Any = None,
        token_generator: Any = None,
        refresh_token_generator: Any = None,
        *args: Any,
        **kwargs: Any,  # the device flow's settings, which this server has no use for
    ) -> None:
        self.auth_grant = S256AuthorizationCodeGrant(request_validator)
        self.refresh_grant = RefreshTokenGrant(request_validator)
        self.bearer = BearerToken(
            request_validator, token_generator, token_expires_in, refresh_token_generator
        )
        AuthorizationEndpoint.__init__(
            self,
            default_response_type="code",
            response_types={"code": self.auth_grant},
            default_token_type=self.bearer,
        )
        TokenEndpoint.__init__(
            self,
            default_grant_type="authorization_code",
            grant_types={
                "authorization_code": self.auth_grant,
                "refresh_token": self.refresh_grant,
            },
            default_token_type=self.bearer,
        )
        ResourceEndpoint.__init__(
            self,
            default_token="Bearer",  # noqa: S106 (a token type)
            token_types={"Bearer": self.bearer},
        )
        RevocationEndpoint.__init__(self, request_validator)
