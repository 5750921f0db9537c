"""A person's upstream tokens: the code exchange, and the access token a call uses, refreshed
before it expires under the account row's lock.

`upstream_access_token` is what the gateway asks (through registry/gateway/port.py) for each call
to a per-person server. The refresh runs inside `SELECT ... FOR UPDATE` on the person's account:
of any number of gateway processes and calls that find the token expiring, one refreshes and the
others wait for it and use its token, so an upstream that rotates refresh tokens never sees the
old one twice (which would lock the person out).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from registry.servers.models import McpServer, UpstreamAuth
from registry.upstream.http import (
    UpstreamHttpError,
    UpstreamRefused,
    answer_json,
    upstream_request,
)
from registry.upstream.models import AccountState, UpstreamAccount, UpstreamClient

# Refresh this long before the access token expires (a call must not start on a dying token).
REFRESH_MARGIN_SECONDS = 60.0

# Why a call cannot use a person's account (the gateway's refusal codes).
UPSTREAM_ACCOUNT_NOT_LINKED = "upstream_account_not_linked"
UPSTREAM_ACCOUNT_BROKEN = "upstream_account_broken"
UPSTREAM_ACCOUNT_UNREACHABLE = "upstream_account_unreachable"
# Discovery of a per-person server without an admin's account linked for it.
UPSTREAM_DISCOVERY_NOT_LINKED = "upstream_discovery_not_linked"


class UpstreamAccountUnusable(Exception):
    """No usable account: `code` is one of the codes above; `message` says what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class UpstreamToken:
    """What goes upstream for one person: `header: prefix + access_token` (an OAuth access
    token as `Authorization: Bearer`, or the secret the person entered in the header the admin
    named), and which account it is, for the call's record (never the token)."""

    access_token: str
    expires_at: float | None  # POSIX seconds; None: until it is refused
    subject: str
    header: str = "Authorization"
    prefix: str = "Bearer "
    account_id: int = 0

    @property
    def value(self) -> str:
        return f"{self.prefix}{self.access_token}"


def client_auth(client: UpstreamClient) -> dict[str, str]:
    """The client's credentials for the token endpoint (client_secret_post, or a public id)."""
    fields = {"client_id": client.client_id}
    secret = client.client_secret.get("client_secret")
    if secret:
        fields["client_secret"] = secret
    return fields


def token_request(client: UpstreamClient, form: dict[str, str]) -> dict[str, Any]:
    """POST to the token endpoint; the answer, or UpstreamHttpError with the upstream's error."""
    answer = upstream_request(
        "POST",
        client.token_endpoint,
        data={**form, **client_auth(client)},
        headers={"Accept": "application/json"},
    )
    document = answer_json(answer, "the token answer")
    if answer.status_code != 200 or not document.get("access_token"):
        error = str(document.get("error") or f"HTTP {answer.status_code}")
        description = str(document.get("error_description") or "")[:200]
        raise UpstreamRefused(f"{error}{': ' + description if description else ''}")
    return document


def account_tokens_store(account: UpstreamAccount, answer: dict[str, Any]) -> None:
    """Keep what a token answer gave (the refresh token only if it sent one: some keep theirs)."""
    tokens = {"access_token": str(answer["access_token"])}
    refresh = answer.get("refresh_token") or account.tokens.get("refresh_token")
    if refresh:
        tokens["refresh_token"] = str(refresh)
    account.tokens = tokens
    lifetime = answer.get("expires_in")
    account.expires_at = (
        timezone.now() + timedelta(seconds=int(lifetime))
        if isinstance(lifetime, int | float)
        else None
    )
    if answer.get("scope"):
        account.scopes = str(answer["scope"])[:1000]


def _usable(account: UpstreamAccount, refused: str) -> bool:
    token = account.tokens.get("access_token", "")
    if not token or token == refused:
        return False
    if account.expires_at is None:
        return True
    return account.expires_at.timestamp() - time.time() > REFRESH_MARGIN_SECONDS


def _token_of(account: UpstreamAccount) -> UpstreamToken:
    expires = account.expires_at.timestamp() if account.expires_at else None
    return UpstreamToken(
        account.tokens["access_token"], expires, account.subject, account_id=account.pk
    )


def _secret_of(account: UpstreamAccount, refused: str) -> UpstreamToken:
    """The secret the person entered, in the header the admin named. One the upstream refused
    (HTTP 401) marks the account broken: the person enters a new one (there is no refresh)."""
    from registry.upstream.services import (  # noqa: PLC0415 (services builds on this module)
        account_mark_broken,
        broken_message,
    )

    server = account.server
    secret = str(account.tokens.get("secret") or "")
    if account.state != AccountState.LINKED or not secret:
        raise UpstreamAccountUnusable(
            UPSTREAM_ACCOUNT_BROKEN, broken_message(server.slug, server.upstream_auth)
        )
    if secret == refused:
        account_mark_broken(
            account_id=account.pk, problem="the upstream refused this token or key (HTTP 401)"
        )
        raise UpstreamAccountUnusable(
            UPSTREAM_ACCOUNT_BROKEN, broken_message(server.slug, server.upstream_auth)
        )
    return UpstreamToken(
        secret,
        None,
        account.subject,
        header=server.person_secret_header or "Authorization",
        prefix=server.person_secret_prefix,
        account_id=account.pk,
    )


def upstream_access_token(*, server_id: int, person_id: int, refused: str = "") -> UpstreamToken:
    """The person's access token for the server (or the secret they entered, for a
    person_secret server), refreshed first if it expires within
    REFRESH_MARGIN_SECONDS or is the one the upstream just `refused`. UpstreamAccountUnusable
    when there is no linked account, or the refresh fails (the account is then marked broken)."""
    from registry.upstream.services import (  # noqa: PLC0415 (services builds on this module)
        account_mark_broken,
        broken_message,
        not_linked_message,
    )

    account = (
        UpstreamAccount.objects.select_related("server")
        .filter(server_id=server_id, person_id=person_id)
        .first()
    )
    if account is None:
        slug, mode = McpServer.objects.filter(pk=server_id).values_list(
            "slug", "upstream_auth"
        ).first() or ("", "")
        raise UpstreamAccountUnusable(UPSTREAM_ACCOUNT_NOT_LINKED, not_linked_message(slug, mode))
    if account.server.upstream_auth == UpstreamAuth.PERSON_SECRET:
        return _secret_of(account, refused)
    if account.state == AccountState.LINKED and _usable(account, refused):
        return _token_of(account)
    problem = ""
    with transaction.atomic():
        locked = UpstreamAccount.objects.select_for_update().get(pk=account.pk)
        if locked.state != AccountState.LINKED:
            raise UpstreamAccountUnusable(
                UPSTREAM_ACCOUNT_BROKEN, broken_message(account.server.slug)
            )
        if _usable(locked, refused):  # another call refreshed it while this one waited
            return _token_of(locked)
        refresh = locked.tokens.get("refresh_token", "")
        client = UpstreamClient.objects.filter(server_id=server_id).first()
        if not refresh or client is None or not client.ready:
            problem = "the upstream gave no refresh token and the access token expired"
        else:
            try:
                answer = token_request(
                    client,
                    {
                        "grant_type": "refresh_token",
                        "refresh_token": refresh,
                        "resource": client.resource,
                    },
                )
            except UpstreamRefused as exc:
                problem = f"the refresh was refused: {exc}"
            except UpstreamHttpError as exc:  # not the account's fault: try again next call
                raise UpstreamAccountUnusable(
                    UPSTREAM_ACCOUNT_UNREACHABLE,
                    f"Toolroom could not refresh your account's token ({exc}); try again shortly.",
                ) from exc
            else:
                account_tokens_store(locked, answer)
                locked.refreshed_at = timezone.now()
                locked.refreshes += 1
                locked.save()
                return _token_of(locked)
    account_mark_broken(account_id=account.pk, problem=problem)
    raise UpstreamAccountUnusable(UPSTREAM_ACCOUNT_BROKEN, broken_message(account.server.slug))


def needs_admin_account_message(server_slug: str) -> str:
    """What discovery and the server page say when no admin's account is linked for it."""
    return (
        f"'{server_slug}' needs an admin's account to discover tools: it signs each person in "
        f"with their own account and has no credential of Toolroom's. Link yours with "
        f'"Link my account for discovery" on the server\'s admin page, or run `manage.py mcp '
        f"link {server_slug} --user YOUR_NAME` and open the URL it prints."
    )


def discovery_access_token(*, server_id: int, refused: str = "") -> UpstreamToken:
    """The access token of the admin's account linked for discovering the server, refreshed as
    a call's would be (`upstream_access_token`). UpstreamAccountUnusable when no account is
    linked for discovery (UPSTREAM_DISCOVERY_NOT_LINKED) or it broke."""
    account = (
        UpstreamAccount.objects.select_related("server")
        .filter(server_id=server_id, for_discovery=True)
        .first()
    )
    if account is None:
        slug = McpServer.objects.filter(pk=server_id).values_list("slug", flat=True).first()
        raise UpstreamAccountUnusable(
            UPSTREAM_DISCOVERY_NOT_LINKED, needs_admin_account_message(slug or "")
        )
    try:
        return upstream_access_token(
            server_id=server_id, person_id=account.person_id, refused=refused
        )
    except UpstreamAccountUnusable as exc:
        raise UpstreamAccountUnusable(
            exc.code,
            f"The account of {account.person} that discovers '{account.server.slug}' cannot be "
            f"used: {exc.message}",
        ) from exc
