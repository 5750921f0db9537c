"""Linking, unlinking and breaking a person's upstream account, and the pages that say where.

Linking is the upstream's own authorization code flow with PKCE (S256) and the RFC 8707 resource:
`link_start` keeps the state and the verifier in the person's portal session and sends the browser
to the upstream's authorization endpoint; `link_finish` takes the code at Toolroom's one callback,
only for the session that started it, and stores the tokens encrypted. Every change moves the
catalogue versions of the person's teams, so every gateway process reads the person's accounts
again on the next call (registry/oauth/tokens.py reads them with the person's token).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from registry.audit.services import audit_record
from registry.catalogue.versions import catalogue_versions_bump_on_commit
from registry.core.errors import ApplicationError
from registry.servers.models import PER_PERSON_MODES, McpServer, UpstreamAuth
from registry.teams.models import Grant, Membership
from registry.upstream.discovery import upstream_discover
from registry.upstream.http import UpstreamHttpError, upstream_request
from registry.upstream.models import AccountState, Registration, UpstreamAccount, UpstreamClient
from registry.upstream.tokens import account_tokens_store, client_auth, token_request

SESSION_KEY = "upstream_links"
LINK_SECONDS = 600  # how long a started link waits for its callback
MAX_PENDING = 5


def link_page_url() -> str:
    """The portal's Connected accounts page (the URL every "link your account" error names)."""
    return settings.TOOLROOM_PUBLIC_URL.rstrip("/") + reverse("portal:upstream-accounts")


def not_linked_message(server_slug: str, mode: str = UpstreamAuth.PERSON_OAUTH) -> str:
    if mode == UpstreamAuth.PERSON_SECRET:
        return (
            f"'{server_slug}' acts as each person with their own token or API key there, and "
            f"you have not entered yours: enter it at {link_page_url()} and call again."
        )
    return (
        f"'{server_slug}' acts as each person with their own account there, and you have not "
        f"linked yours: link it at {link_page_url()} and call again."
    )


def broken_message(server_slug: str, mode: str = UpstreamAuth.PERSON_OAUTH) -> str:
    if mode == UpstreamAuth.PERSON_SECRET:
        return (
            f"'{server_slug}' refused your token or API key: enter a new one at {link_page_url()}."
        )
    return (
        f"Your account at '{server_slug}' no longer works (the upstream refused its token and "
        f"the refresh): re-link your account at {link_page_url()}."
    )


def _bump_person_teams(person_id: int, reason: str) -> None:
    teams = Membership.objects.filter(user_id=person_id).values_list("team_id", flat=True)
    catalogue_versions_bump_on_commit(team_ids=list(teams), reason=reason)


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def link_start(
    *,
    person: AbstractBaseUser | AnonymousUser,
    server: McpServer,
    session: Any,
    for_discovery: bool = False,
) -> str:
    """Where to send the person's browser to link their account at `server` (discovering and
    registering first if Toolroom has not yet). `for_discovery`: an admin links the account that
    discovers the server's tools and checks its health. ApplicationError if it cannot."""
    if server.upstream_auth != UpstreamAuth.PERSON_OAUTH:
        raise ApplicationError(f"'{server.slug}' does not use each person's own account.")
    if for_discovery and not getattr(person, "is_staff", False):
        raise ApplicationError("Only an admin links the account that discovers a server's tools.")
    client = UpstreamClient.objects.filter(server=server).first()
    if client is None or not client.ready:
        try:
            client = upstream_discover(server=server)
        except UpstreamHttpError as exc:
            raise ApplicationError(f"Toolroom cannot sign in at '{server.slug}': {exc}") from exc
    verifier, challenge = _pkce()
    state = secrets.token_urlsafe(32)
    now = time.time()
    pending = {
        key: value
        for key, value in (session.get(SESSION_KEY) or {}).items()
        if now - float(value["at"]) < LINK_SECONDS
    }
    while len(pending) >= MAX_PENDING:
        pending.pop(min(pending, key=lambda key: float(pending[key]["at"])))
    pending[state] = {
        "server": server.pk,
        "verifier": verifier,
        "at": now,
        "person": person.pk,
        "discovery": bool(for_discovery),
    }
    session[SESSION_KEY] = pending
    query = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": client.redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": client.resource,
    }
    if client.scopes:
        query["scope"] = client.scopes
    separator = "&" if "?" in client.authorization_endpoint else "?"
    return f"{client.authorization_endpoint}{separator}{urlencode(query)}"


def link_finish(
    *,
    person: AbstractBaseUser | AnonymousUser,
    session: Any,
    state: str,
    code: str,
    error: str = "",
) -> UpstreamAccount:
    """Take the code at Toolroom's callback: only a state this very session started, for the
    person signed in now, within LINK_SECONDS, once. ApplicationError saying why not."""
    pending = dict(session.get(SESSION_KEY) or {})
    started = pending.pop(state, None) if state else None
    session[SESSION_KEY] = pending
    if started is None or started.get("person") != person.pk:
        raise ApplicationError(
            "This link was not started from this portal session (or was already used): "
            "start it again from Connected accounts."
        )
    if time.time() - float(started["at"]) >= LINK_SECONDS:
        raise ApplicationError("This link took too long: start it again from Connected accounts.")
    server = McpServer.objects.get(pk=started["server"])
    if error:
        raise ApplicationError(f"'{server.slug}' did not link your account: {error[:200]}.")
    client = UpstreamClient.objects.get(server=server)
    try:
        answer = token_request(
            client,
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": client.redirect_uri,
                "code_verifier": started["verifier"],
                "resource": client.resource,
            },
        )
    except UpstreamHttpError as exc:
        raise ApplicationError(f"'{server.slug}' refused the sign-in: {exc}") from exc
    with transaction.atomic():
        account, _ = UpstreamAccount.objects.select_for_update().get_or_create(
            server=server,
            person_id=person.pk,
            defaults={"state": AccountState.LINKED, "linked_at": timezone.now()},
        )
        account_tokens_store(account, answer)
        account.state = AccountState.LINKED
        account.problem = ""
        account.linked_at = timezone.now()
        account.subject = str(answer.get("subject") or answer.get("user") or "")[:300]
        discovery = bool(started.get("discovery")) and getattr(person, "is_staff", False)
        if discovery:  # the one account discovery and health checks use from now on
            UpstreamAccount.objects.filter(server=server, for_discovery=True).exclude(
                pk=account.pk
            ).update(for_discovery=False)
            account.for_discovery = True
        account.save()
        audit_record(
            actor=person,
            action="upstream.account_linked",
            target=account,
            server=server,
            summary=f"{person.get_username()} linked their account at {server.slug}"
            + (", for discovering its tools." if discovery else "."),
        )
        _bump_person_teams(person.pk, f"upstream account linked at {server.slug}")
    return account


MAX_SECRET_LENGTH = 4096


@transaction.atomic
def upstream_client_import(
    *, actor: Any, server: McpServer, client_id: str, client_secret: str = "", scopes: str = ""
) -> UpstreamClient:
    """Make the client an import names (an mcp.json `oauth` object's `clientId`) the server's
    upstream OAuth client, as an admin's (Toolroom registers none of its own). A new client id
    drops the stored secret (it was the old client's) unless the file gives one; the endpoints
    are discovered when someone first links. Audited (`upstream.client_imported`, never the
    secret)."""
    client, _ = UpstreamClient.objects.select_for_update().get_or_create(server=server)
    before = {"registration": client.registration, "client_id": client.client_id}
    if client_secret or client.client_id != client_id:
        client.client_secret = {"client_secret": client_secret} if client_secret else {}
    client.client_id = client_id
    client.registration = Registration.ADMIN
    if scopes:
        client.scopes = scopes
    client.save()
    audit_record(
        actor=actor,
        action="upstream.client_imported",
        target=client,
        server=server,
        summary=f"An import made {client_id!r} the upstream OAuth client of {server.slug}.",
        before=before,
        after={
            "registration": client.registration,
            "client_id": client_id,
            "client_secret": "set" if client.client_secret else "none",
            "scopes": client.scopes,
        },
    )
    return client


@transaction.atomic
def secret_store(
    *, person: AbstractBaseUser | AnonymousUser, server: McpServer, secret: str
) -> UpstreamAccount:
    """Keep the token or API key a person entered for a person_secret server (encrypted; never
    shown again, only replaced or removed). ApplicationError if it cannot be sent in a header."""
    if server.upstream_auth != UpstreamAuth.PERSON_SECRET:
        raise ApplicationError(f"'{server.slug}' does not take each person's own secret.")
    secret = secret.strip()
    if not secret:
        raise ApplicationError("Enter the token or API key.")
    if len(secret) > MAX_SECRET_LENGTH or any(
        ord(character) < 0x20 or ord(character) == 0x7F for character in secret
    ):
        raise ApplicationError(
            "That cannot be sent in an HTTP header (a line break, a control character, or more "
            f"than {MAX_SECRET_LENGTH} characters)."
        )
    account, created = UpstreamAccount.objects.select_for_update().get_or_create(
        server=server,
        person_id=person.pk,
        defaults={"state": AccountState.LINKED, "linked_at": timezone.now()},
    )
    account.tokens = {"secret": secret}
    account.state = AccountState.LINKED
    account.problem = ""
    account.subject = ""
    account.scopes = ""
    account.expires_at = None
    account.linked_at = timezone.now()
    account.save()
    audit_record(
        actor=person,
        action="upstream.account_linked",
        target=account,
        server=server,
        summary=f"{person.get_username()} {'entered' if created else 'replaced'} their secret "
        f"for {server.slug}.",
    )
    _bump_person_teams(account.person_id, f"upstream secret entered for {server.slug}")
    return account


@transaction.atomic
def account_unlink(*, actor: Any, account: UpstreamAccount, reason: str = "") -> None:
    """Remove a person's link (the person, an admin, or the person leaving every team that holds
    the server): its tokens go with the row. After commit, an OAuth link's tokens are revoked at
    the upstream when its authorization server advertises a revocation endpoint (RFC 7009; best
    effort, audited either way)."""
    server, person_id = account.server, account.person_id
    audit_record(
        actor=actor,
        action="upstream.account_unlinked",
        target=account,
        server=server,
        summary=f"Unlinked {account.person}'s account at {server.slug}"
        f"{': ' + reason if reason else ''}.",
    )
    tokens = dict(account.tokens or {})
    label = f"{account.person}'s account at {server.slug}"
    account.delete()
    _bump_person_teams(person_id, f"upstream account unlinked at {server.slug}")
    if server.upstream_auth == UpstreamAuth.PERSON_OAUTH and tokens:
        transaction.on_commit(
            lambda: tokens_revoke_upstream(server=server, tokens=tokens, label=label)
        )


def tokens_revoke_upstream(*, server: McpServer, tokens: dict[str, str], label: str) -> str:
    """Revoke an unlinked account's tokens at the upstream (RFC 7009): the refresh token first
    (which revokes its access tokens at most providers), then the access token. Best effort:
    what happened is audited (`upstream.token_revoked`), never the tokens; returns it."""
    client = UpstreamClient.objects.filter(server=server).first()
    if client is None or not client.revocation_endpoint:
        outcome = "not revoked at the upstream: it advertises no revocation endpoint"
    else:
        failures = []
        for hint in ("refresh_token", "access_token"):
            token = tokens.get(hint)
            if not token:
                continue
            try:
                answer = upstream_request(
                    "POST",
                    client.revocation_endpoint,
                    data={"token": token, "token_type_hint": hint, **client_auth(client)},
                    headers={"Accept": "application/json"},
                )
            except UpstreamHttpError as exc:
                failures.append(f"{hint}: {str(exc)[:200]}")
                continue
            if answer.status_code != 200:  # RFC 7009 2.2: 200 whether or not it was valid
                failures.append(f"{hint}: HTTP {answer.status_code}")
        outcome = (
            f"revoking at the upstream failed ({'; '.join(failures)})"
            if failures
            else "revoked at the upstream"
        )
    audit_record(
        actor=None,
        action="upstream.token_revoked",
        target=server,
        server=server,
        summary=f"{label}: {outcome}.",
    )
    return outcome


def upstream_accounts_prune(
    *, person_ids: list[int] | None = None, server_ids: list[int] | None = None, reason: str
) -> int:
    """Remove the accounts of people who no longer belong to any team holding an active grant
    on the account's server (of the given people, or at the given servers); each removal is
    audited like an unlink, and its tokens revoked at the upstream. How many went."""
    accounts = UpstreamAccount.objects.select_related("server", "person")
    if person_ids is not None:
        accounts = accounts.filter(person_id__in=person_ids)
    if server_ids is not None:
        accounts = accounts.filter(server_id__in=server_ids)
    removed = 0
    for account in accounts:
        teams = Membership.objects.filter(user_id=account.person_id).values_list(
            "team_id", flat=True
        )
        held = Grant.objects.active().filter(server_id=account.server_id, team_id__in=teams)
        if held.exists():
            continue
        account_unlink(
            actor=None,
            account=account,
            reason=f"{account.person} no longer belongs to a team that holds it ({reason})",
        )
        removed += 1
    return removed


@transaction.atomic
def account_mark_broken(*, account_id: int, problem: str) -> None:
    """The upstream refused the token and its refresh: the person must re-link."""
    account = UpstreamAccount.objects.select_for_update().filter(pk=account_id).first()
    if account is None or account.state == AccountState.BROKEN:
        return
    account.state = AccountState.BROKEN
    account.problem = problem[:500]
    account.tokens = {}
    account.save()
    audit_record(
        actor=None,
        action="upstream.account_broken",
        target=account,
        server=account.server,
        summary=f"{account.person}'s account at {account.server.slug} broke: {problem[:200]}",
    )
    _bump_person_teams(account.person_id, "upstream account broken")


def person_upstream_accounts(*, person: AbstractBaseUser | AnonymousUser) -> list[dict[str, Any]]:
    """Every per-person server of the person's teams (granted to the team), linked or not."""
    if person.pk is None:
        return []
    team_ids = Membership.objects.filter(user_id=person.pk).values_list("team_id", flat=True)
    servers = (
        McpServer.objects.filter(
            upstream_auth__in=PER_PERSON_MODES,
            team_grants__team_id__in=list(team_ids),
            team_grants__revoked_at__isnull=True,
        )
        .distinct()
        .order_by("slug")
    )
    accounts = {
        account.server_id: account
        for account in UpstreamAccount.objects.filter(person_id=person.pk)
    }
    return [{"server": server, "account": accounts.get(server.pk)} for server in servers]
