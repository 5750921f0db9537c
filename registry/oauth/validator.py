"""What Toolroom adds to django-oauth-toolkit's request validator (the toolkit's
OAUTH2_VALIDATOR_CLASS): the person's client authorization on every code and token, the gateway as
the only resource, codes that revoke what they issued when used twice, refreshes refused for a
person who left the team, and errors that say what was wrong.

Everything else (client authentication, redirect URI matching, PKCE, refresh token rotation and
reuse protection, RFC 8707 narrowing) is the toolkit's and oauthlib's.
"""

from __future__ import annotations

from typing import Any

from django.db import router, transaction
from django.utils import timezone
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauthlib.oauth2.rfc6749 import errors

from registry.oauth import cimd
from registry.oauth.models import AccessToken, ClientAuthorization, Grant, RefreshToken
from registry.oauth.selectors import authorization_standing_problem
from registry.oauth.tokens import gateway_resource_url, resource_is_gateway, rotating


def _invalid_target(request: Any, resource: str) -> errors.CustomOAuth2Error:
    return errors.CustomOAuth2Error(
        error="invalid_target",
        description=f"Toolroom issues tokens for its gateway only ({gateway_resource_url()}), "
        f"not for {resource}.",
        request=request,
    )


class ToolroomValidator(OAuth2Validator):
    # --- Clients ---------------------------------------------------------------------------

    def _load_application(self, client_id: str, request: Any) -> Any:
        """The toolkit's lookup, except that a client metadata document that cannot be used
        answers with why (the toolkit only says the client is unknown)."""
        client = super()._load_application(client_id, request)
        if client is None and cimd.is_metadata_document_url(client_id):
            reason = cimd.metadata_document_problem(client_id)
            if reason:
                request.toolroom_client_problem = reason
        return client

    def _unknown_client(self, client_id: str, request: Any) -> str:
        problem = getattr(request, "toolroom_client_problem", "")
        if problem:
            return f"The client's metadata document at {client_id} cannot be used: {problem}."
        return (
            f"No client '{client_id[:200]}' is registered with Toolroom (register it, or use the "
            "HTTPS address of a client metadata document as its client_id)."
        )

    def validate_client_id(self, client_id: str, request: Any, *args: Any, **kwargs: Any) -> bool:
        if self._load_application(client_id, request) is not None:
            return True
        raise errors.InvalidClientIdError(
            description=self._unknown_client(client_id, request), request=request
        )

    def authenticate_client_id(
        self, client_id: str, request: Any, *args: Any, **kwargs: Any
    ) -> bool:
        if super().authenticate_client_id(client_id, request, *args, **kwargs):
            return True
        raise errors.InvalidClientError(
            description=self._unknown_client(client_id or "", request), request=request
        )

    def authenticate_client(self, request: Any, *args: Any, **kwargs: Any) -> bool:
        if super().authenticate_client(request, *args, **kwargs):
            return True
        if request.client is None and request.client_id:
            raise errors.InvalidClientError(
                description=self._unknown_client(request.client_id, request), request=request
            )
        return False

    def validate_redirect_uri(
        self, client_id: str, redirect_uri: str, request: Any, *args: Any, **kwargs: Any
    ) -> bool:
        if request.client.redirect_uri_allowed(redirect_uri):
            return True
        raise errors.MismatchingRedirectURIError(
            description=f"The redirect_uri {redirect_uri[:300]} is not one this client registered.",
            request=request,
        )

    # --- Authorization codes -----------------------------------------------------------------

    def save_authorization_code(
        self, client_id: str, code: dict[str, str], request: Any, *args: Any, **kwargs: Any
    ) -> None:
        # The gateway is the only resource; the consent page named the person's authorization.
        resources = list(getattr(request, "resource", None) or [])
        for resource in resources:
            if not resource_is_gateway(resource):
                raise _invalid_target(request, resource)
        request.resource = [gateway_resource_url()]
        grant = self._create_authorization_code(request, code)
        authorization_id = getattr(request, "toolroom_authorization_id", None)
        if authorization_id is None:  # only the consent page issues codes
            raise errors.ServerError(description="No client authorization for this code.")
        Grant.objects.filter(pk=grant.pk).update(authorization_id=authorization_id)

    def validate_code(
        self, client_id: str, code: str, client: Any, request: Any, *args: Any, **kwargs: Any
    ) -> bool:
        grant = (
            Grant.objects.select_related("authorization").filter(code=code, application=client)
        ).first()
        if grant is None:
            raise errors.InvalidGrantError(
                description="The authorization code is unknown to Toolroom (or was issued to "
                "another client).",
                request=request,
            )
        if grant.used_at is not None:
            # RFC 6749 section 4.1.2: a code used twice revokes the tokens issued from it.
            RefreshToken.revoke_family(grant.token_family)
            raise errors.InvalidGrantError(
                description="The authorization code was already used; the tokens issued from it "
                "are now revoked. Sign in again.",
                request=request,
            )
        if grant.is_expired():
            raise errors.InvalidGrantError(
                description="The authorization code has expired (codes are good for "
                f"{int((grant.expires - grant.created).total_seconds())} seconds); sign in again.",
                request=request,
            )
        problem = authorization_standing_problem(authorization=grant.authorization)
        if problem:
            raise errors.InvalidGrantError(description=problem, request=request)
        request.scopes = grant.scope.split(" ")
        request.user = grant.user
        request.toolroom_grant = grant
        return True

    def invalidate_authorization_code(
        self, client_id: str, code: str, request: Any, *args: Any, **kwargs: Any
    ) -> None:
        """Nothing to do: the code was claimed with the tokens it issued (save_bearer_token)."""

    # --- Tokens ------------------------------------------------------------------------------

    def validate_refresh_token(
        self, refresh_token: str, client: Any, request: Any, *args: Any, **kwargs: Any
    ) -> bool:
        if not super().validate_refresh_token(refresh_token, client, request, *args, **kwargs):
            raise errors.InvalidGrantError(
                description="The refresh token is unknown, expired or revoked (a refresh token "
                "works once: using an old one revokes the whole sign-in). Sign in again.",
                request=request,
            )
        instance = request.refresh_token_instance
        authorization = ClientAuthorization.objects.filter(pk=instance.authorization_id).first()
        problem = authorization_standing_problem(authorization=authorization)
        if problem:
            raise errors.InvalidGrantError(description=problem, request=request)
        request.toolroom_authorization = authorization
        return True

    def save_bearer_token(
        self, token: dict[str, Any], request: Any, *args: Any, **kwargs: Any
    ) -> Any:
        """The toolkit's save, in one transaction with claiming the code (a second exchange of the
        same code, even a concurrent one, finds it claimed and issues nothing)."""
        with transaction.atomic(using=router.db_for_write(AccessToken)):
            grant = getattr(request, "toolroom_grant", None)
            if request.grant_type == "authorization_code" and grant is not None:
                claimed = Grant.objects.filter(pk=grant.pk, used_at__isnull=True).update(
                    used_at=timezone.now()
                )
                if not claimed:
                    raise errors.InvalidGrantError(
                        description="The authorization code was already used.", request=request
                    )
            reset = rotating.set(request.grant_type == "refresh_token")
            try:
                result = self._save_bearer_token(token, request, *args, **kwargs)
            finally:
                rotating.reset(reset)
            if request.grant_type == "authorization_code" and grant is not None:
                # The family this code started: what a second exchange of the code revokes.
                family = getattr(request, "toolroom_token_family", None)
                Grant.objects.filter(pk=grant.pk).update(token_family=family)
            return result

    def _authorization_for(self, request: Any) -> Any:
        grant = getattr(request, "toolroom_grant", None)
        if grant is not None:
            return grant.authorization
        return getattr(request, "toolroom_authorization", None)

    def _check_and_set_request_resource(self, request: Any) -> None:
        super()._check_and_set_request_resource(request)
        for resource in request.resource or []:
            if not resource_is_gateway(resource):
                raise _invalid_target(request, resource)
        request.resource = [gateway_resource_url()]

    def _create_access_token(
        self, expires: Any, request: Any, token: dict[str, Any], source_refresh_token: Any = None
    ) -> Any:
        access_token = super()._create_access_token(expires, request, token, source_refresh_token)
        authorization = self._authorization_for(request)
        if authorization is not None:
            AccessToken.objects.filter(pk=access_token.pk).update(authorization=authorization)
            access_token.authorization = authorization
            ClientAuthorization.objects.filter(pk=authorization.pk).update(
                last_used_at=timezone.now()
            )
        return access_token

    def _create_refresh_token(
        self, request: Any, refresh_token_code: str, access_token: Any, previous: Any
    ) -> Any:
        refresh_token = super()._create_refresh_token(
            request, refresh_token_code, access_token, previous
        )
        authorization = self._authorization_for(request)
        if authorization is not None:
            RefreshToken.objects.filter(pk=refresh_token.pk).update(authorization=authorization)
        request.toolroom_token_family = refresh_token.token_family
        return refresh_token
