"""Toolroom as an OAuth 2.1 authorization server, through its real endpoints (Django's test client):
metadata, registration, the consent page, PKCE, codes, refresh rotation, and every refusal the
issue lists answered with the RFCs' error, saying what was wrong and writing nothing half-way."""

from __future__ import annotations

import json

import pytest
from django.test import Client as HttpClient

from registry.oauth import services as oauth_services
from registry.oauth.models import AccessToken, ClientAuthorization, Grant, RefreshToken
from registry.oauth.tokens import gateway_resource_url, person_token_authenticate
from registry.teams import services
from registry.teams.models import MembershipLevel
from tests.catalogue_helpers import CONNECT, READ, WRITE, approved_server
from tests.factories import GrantFactory, TeamFactory, UserFactory
from tests.oauth_helpers import (
    REDIRECT_URI,
    allow,
    authorize,
    authorize_params,
    consent_form,
    exchange,
    pkce_pair,
    redirect_query,
    refresh,
    register_client,
    sign_in_tokens,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def world(charlie, dave, committed):
    """charlie owns alpha (every role); dave is a member of alpha who may act as review only;
    erin is in beta. alpha holds `files` (read, write and connect tools)."""
    erin = UserFactory(username="erin")
    with committed():
        alpha = TeamFactory(slug="alpha", name="Alpha")
        beta = TeamFactory(slug="beta", name="Beta")
        services.team_member_set(
            actor="test", team=alpha, user=charlie, level=MembershipLevel.OWNER
        )
        services.team_member_set(
            actor="test", team=alpha, user=dave, roles=[alpha.roles.get(name="review")]
        )
        services.team_member_set(actor="test", team=beta, user=erin, level=MembershipLevel.OWNER)
        files = approved_server(
            "files", {"read_file": READ, "write_file": WRITE, "upload": CONNECT}
        )
        GrantFactory(team=alpha, server=files)
    return {"alpha": alpha, "beta": beta, "erin": erin}


def choice(team, role_name: str) -> str:
    return f"{team.pk}:{team.roles.get(name=role_name).pk}"


def issued():
    """The access tokens issued to people (registration answers carry a token of their own)."""
    return AccessToken.objects.filter(authorization__isnull=False)


def signed_in(user) -> HttpClient:
    http = HttpClient()
    http.force_login(user)
    return http


# --- Metadata and registration ---------------------------------------------------------------


def test_the_authorization_server_metadata_advertises_s256_only_and_both_registrations(db):
    data = HttpClient().get("/.well-known/oauth-authorization-server").json()
    assert data["issuer"] == "http://127.0.0.1:8000"
    assert data["code_challenge_methods_supported"] == ["S256"]
    assert data["response_types_supported"] == ["code"]
    assert data["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert data["token_endpoint_auth_methods_supported"] == ["none"]
    assert data["authorization_endpoint"].endswith("/oauth/authorize/")
    assert data["token_endpoint"].endswith("/oauth/token/")
    assert data["registration_endpoint"].endswith("/oauth/register/")
    assert data["client_id_metadata_document_supported"] is True
    assert data["authorization_response_iss_parameter_supported"] is True


def test_the_admin_switches_registration_off_and_the_metadata_says_so(db, alice):
    oauth_services.registration_policy_update(
        actor=alice, metadata_documents=False, dynamic_registration=False
    )
    data = HttpClient().get("/.well-known/oauth-authorization-server").json()
    assert "registration_endpoint" not in data
    assert data["client_id_metadata_document_supported"] is False
    answer = HttpClient().post(
        "/oauth/register/",
        data=json.dumps({"redirect_uris": [REDIRECT_URI], "token_endpoint_auth_method": "none"}),
        content_type="application/json",
    )
    assert answer.status_code == 403
    assert answer.json()["error"] == "access_denied"
    assert "turned off" in answer.json()["error_description"]


def test_the_protected_resource_metadata_is_served_in_the_path_suffixed_form_too(db):
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ):
        data = HttpClient().get(path).json()
        assert data["resource"] == gateway_resource_url() == "http://127.0.0.1:8000/mcp"
        assert data["authorization_servers"] == ["http://127.0.0.1:8000"]
        assert data["bearer_methods_supported"] == ["header"]


def test_dynamic_registration_makes_public_clients_only(db):
    http = HttpClient()
    client = register_client(http)
    assert client.client_type == "public"
    assert client.registration_source == "dcr"
    answer = http.post(
        "/oauth/register/",
        data=json.dumps(
            {"redirect_uris": [REDIRECT_URI], "token_endpoint_auth_method": "client_secret_basic"}
        ),
        content_type="application/json",
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_client_metadata"
    assert "public clients only" in answer.json()["error_description"]


# --- Consent -----------------------------------------------------------------------------------


def test_signing_in_sends_the_person_to_the_portal_sign_in_first(world):
    client = register_client(HttpClient())
    _verifier, challenge = pkce_pair()
    answer = authorize(HttpClient(), client.client_id, challenge)
    assert answer.status_code == 302
    assert answer["Location"].startswith("/portal/sign-in/?next=/oauth/authorize/")


def test_the_consent_page_names_the_client_its_redirect_host_and_what_each_choice_may_use(
    world, charlie
):
    client = register_client(HttpClient(), name="Claude Code")
    http = signed_in(charlie)
    _verifier, challenge = pkce_pair()
    page = authorize(http, client.client_id, challenge)
    html = page.content.decode()
    assert page.status_code == 200
    assert "Claude Code" in html
    assert "Unverified" in html  # it registered itself
    assert "127.0.0.1:33418" in html
    # charlie owns alpha: every role; alpha's tools by class for each role.
    assert f'value="{choice(world["alpha"], "operations")}"' in html
    assert "1 read, 1 write, 1 connect tool" in html
    assert "1 read, 0 write, 0 connect tools" in html  # review
    assert "Beta" not in html


def test_a_member_is_offered_only_the_roles_their_membership_allows(world, dave):
    client = register_client(HttpClient())
    _verifier, challenge = pkce_pair()
    html = authorize(signed_in(dave), client.client_id, challenge).content.decode()
    assert f'value="{choice(world["alpha"], "review")}"' in html
    assert f'value="{choice(world["alpha"], "operations")}"' not in html


def test_allow_issues_a_code_that_gives_short_lived_tokens_bound_to_the_gateway(world, charlie):
    client = register_client(HttpClient())
    http = signed_in(charlie)
    verifier, challenge = pkce_pair()
    query = allow(
        http, authorize(http, client.client_id, challenge), choice(world["alpha"], "implementation")
    )
    assert query["state"] == "state-123"
    assert query["iss"] == "http://127.0.0.1:8000"
    answer = exchange(http, client.client_id, query["code"], verifier)
    assert answer.status_code == 200, answer.content
    tokens = answer.json()
    assert tokens["access_token"].startswith("tra_")
    assert tokens["refresh_token"].startswith("trr_")
    assert tokens["expires_in"] == 600
    assert answer["Cache-Control"] == "no-store"
    lookup = person_token_authenticate(tokens["access_token"])
    identity = lookup.identity
    assert (identity.person_name, identity.team_id, identity.role_name) == (
        "charlie",
        world["alpha"].pk,
        "implementation",
    )
    assert identity.client_name == "Test client"
    assert identity.standing.good
    token = AccessToken.objects.get(pk=identity.token_id)
    assert token.resource == [gateway_resource_url()]
    assert token.token == ""  # only its SHA-256 is stored


def test_deny_sends_access_denied_and_writes_nothing(world, charlie):
    client = register_client(HttpClient())
    http = signed_in(charlie)
    _verifier, challenge = pkce_pair()
    page = authorize(http, client.client_id, challenge)
    query = redirect_query(http.post("/oauth/authorize/", {**consent_form(page), "deny": "1"}))
    assert query["error"] == "access_denied"
    assert query["state"] == "state-123"
    assert not ClientAuthorization.objects.exists()
    assert not Grant.objects.exists()


def test_consent_is_remembered_per_client_and_team_until_revoked(world, charlie):
    client = register_client(HttpClient())
    http = signed_in(charlie)
    sign_in_tokens(http, client, choice(world["alpha"], "review"))
    _verifier, challenge = pkce_pair()
    again = authorize(http, client.client_id, challenge)
    assert "code" in redirect_query(again)  # no page this time
    assert authorize(http, client.client_id, challenge, prompt="consent").status_code == 200
    oauth_services.client_authorization_revoke(
        actor=charlie, authorization=ClientAuthorization.objects.get()
    )
    assert authorize(http, client.client_id, challenge).status_code == 200


def test_a_consent_for_a_team_the_person_is_not_in_is_refused_and_writes_nothing(world, charlie):
    client = register_client(HttpClient())
    http = signed_in(charlie)
    _verifier, challenge = pkce_pair()
    page = authorize(http, client.client_id, challenge)
    answer = http.post(
        "/oauth/authorize/",
        {**consent_form(page), "choice": choice(world["beta"], "review"), "allow": "1"},
    )
    assert answer.status_code == 400
    assert "may not act as" in answer.content.decode()
    assert not ClientAuthorization.objects.exists()
    assert not Grant.objects.exists()


def test_a_consent_for_a_role_the_membership_does_not_allow_is_refused(world, dave):
    client = register_client(HttpClient())
    http = signed_in(dave)
    _verifier, challenge = pkce_pair()
    page = authorize(http, client.client_id, challenge)
    answer = http.post(
        "/oauth/authorize/",
        {**consent_form(page), "choice": choice(world["alpha"], "operations"), "allow": "1"},
    )
    assert answer.status_code == 400
    assert not ClientAuthorization.objects.exists()


def test_a_consent_form_without_its_csrf_token_is_refused_and_writes_nothing(world, charlie):
    client = register_client(HttpClient())
    http = HttpClient(enforce_csrf_checks=True)
    http.force_login(charlie)
    _verifier, challenge = pkce_pair()
    page = authorize(http, client.client_id, challenge)
    fields = consent_form(page)
    answer = http.post(
        "/oauth/authorize/", {**fields, "choice": choice(world["alpha"], "review"), "allow": "1"}
    )
    assert answer.status_code == 403
    assert not ClientAuthorization.objects.exists()
    assert not Grant.objects.exists()


# --- Bad authorization requests -----------------------------------------------------------------


def test_an_unknown_client_is_refused_without_a_redirect(world, charlie):
    _verifier, challenge = pkce_pair()
    answer = authorize(signed_in(charlie), "no-such-client", challenge)
    assert answer.status_code == 400
    html = answer.content.decode()
    assert "invalid_request" in html
    assert "No client &#x27;no-such-client&#x27; is registered" in html


def test_an_unregistered_redirect_uri_is_refused_without_a_redirect(world, charlie):
    client = register_client(HttpClient())
    _verifier, challenge = pkce_pair()
    answer = authorize(
        signed_in(charlie), client.client_id, challenge, redirect_uri="https://evil.example/cb"
    )
    assert answer.status_code == 400
    assert "is not one this client registered" in answer.content.decode()


def test_plain_pkce_and_no_pkce_are_refused(world, charlie):
    client = register_client(HttpClient())
    http = signed_in(charlie)
    verifier, _challenge = pkce_pair()
    plain = redirect_query(
        authorize(http, client.client_id, verifier, code_challenge_method="plain")
    )
    assert plain["error"] == "invalid_request"
    params = authorize_params(client.client_id, "x")
    del params["code_challenge"], params["code_challenge_method"]
    from urllib.parse import urlencode

    missing = redirect_query(http.get("/oauth/authorize/?" + urlencode(params)))
    assert missing["error"] == "invalid_request"
    assert "challenge" in missing["error_description"].lower()


def test_a_token_for_another_resource_is_refused(world, charlie):
    client = register_client(HttpClient())
    _verifier, challenge = pkce_pair()
    query = redirect_query(
        authorize(
            signed_in(charlie),
            client.client_id,
            challenge,
            resource="https://elsewhere.example/api",
        )
    )
    assert query["error"] == "invalid_target"
    assert "gateway only" in query["error_description"]


# --- Bad token requests --------------------------------------------------------------------------


def _code(world, http, client):
    verifier, challenge = pkce_pair()
    query = allow(
        http, authorize(http, client.client_id, challenge), choice(world["alpha"], "review")
    )
    return query["code"], verifier


def test_a_pkce_verifier_that_does_not_match_is_refused_and_issues_nothing(world, charlie):
    client = register_client(HttpClient())
    http = signed_in(charlie)
    code, _verifier = _code(world, http, client)
    answer = exchange(http, client.client_id, code, pkce_pair()[0])
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_grant"
    assert "code_verifier does not match" in answer.json()["error_description"]
    assert not issued().exists()


def test_a_code_used_twice_is_refused_and_revokes_the_tokens_it_issued(world, charlie):
    client = register_client(HttpClient())
    http = signed_in(charlie)
    code, verifier = _code(world, http, client)
    first = exchange(http, client.client_id, code, verifier).json()
    again = exchange(http, client.client_id, code, verifier)
    assert again.status_code == 400
    assert again.json()["error"] == "invalid_grant"
    assert "already used" in again.json()["error_description"]
    assert issued().get().revoked_at is not None
    assert (
        refresh(http, client.client_id, first["refresh_token"]).json()["error"] == "invalid_grant"
    )


def test_an_expired_code_is_refused(world, charlie, clock):
    client = register_client(HttpClient())
    http = signed_in(charlie)
    code, verifier = _code(world, http, client)
    clock.advance(61)
    answer = exchange(http, client.client_id, code, verifier)
    assert answer.json()["error"] == "invalid_grant"
    assert "expired" in answer.json()["error_description"]
    assert not issued().exists()


def test_an_unknown_client_at_the_token_endpoint_is_invalid_client(world, charlie):
    answer = exchange(HttpClient(), "no-such-client", "code", "verifier")
    assert answer.status_code == 401
    assert answer.json()["error"] == "invalid_client"
    assert "No client" in answer.json()["error_description"]


def test_refresh_tokens_rotate_and_reuse_of_an_old_one_revokes_the_family(world, charlie):
    client = register_client(HttpClient())
    http = signed_in(charlie)
    first = sign_in_tokens(http, client, choice(world["alpha"], "review"))
    second = refresh(http, client.client_id, first["refresh_token"]).json()
    assert second["refresh_token"] != first["refresh_token"]
    assert person_token_authenticate(second["access_token"]).identity.team_id == world["alpha"].pk
    reused = refresh(http, client.client_id, first["refresh_token"])
    assert reused.json()["error"] == "invalid_grant"
    assert RefreshToken.objects.filter(revoked__isnull=True).count() == 0
    assert issued().filter(revoked_at__isnull=True).count() == 0
    assert (
        refresh(http, client.client_id, second["refresh_token"]).json()["error"] == "invalid_grant"
    )


def test_a_person_removed_from_the_team_cannot_refresh(world, charlie, committed):
    client = register_client(HttpClient())
    http = signed_in(charlie)
    tokens = sign_in_tokens(http, client, choice(world["alpha"], "review"))
    with committed():
        services.team_member_remove(actor="test", team=world["alpha"], user=charlie)
    answer = refresh(http, client.client_id, tokens["refresh_token"])
    assert answer.json()["error"] == "invalid_grant"
    assert "no longer a member" in answer.json()["error_description"]


def test_connected_apps_lists_and_revokes_the_persons_own(world, charlie, dave):
    client = register_client(HttpClient(), name="My editor")
    http = signed_in(charlie)
    tokens = sign_in_tokens(http, client, choice(world["alpha"], "review"))
    page = http.get("/portal/apps/").content.decode()
    assert 'class="app-name">My editor' in page
    authorization = ClientAuthorization.objects.get()
    # Another person cannot revoke it.
    signed_in(dave).post(f"/portal/apps/{authorization.pk}/revoke/")
    assert ClientAuthorization.objects.get().revoked_at is None
    http.post(f"/portal/apps/{authorization.pk}/revoke/")
    assert ClientAuthorization.objects.get().revoked_at is not None
    assert 'class="app-name">My editor' not in http.get("/portal/apps/").content.decode()
    from registry.oauth.tokens import PersonTokenRejected

    with pytest.raises(PersonTokenRejected) as refused:
        person_token_authenticate(tokens["access_token"])
    assert refused.value.code == "revoked"


def test_an_admin_sets_the_roles_a_member_may_act_as_on_the_membership_page(world, alice, dave):
    from registry.teams.models import Membership

    membership = Membership.objects.get(user=dave)
    alpha = world["alpha"]
    http = signed_in(alice)
    answer = http.post(
        f"/admin/teams/membership/{membership.pk}/change/",
        {"level": "member", "roles": [alpha.roles.get(name="implementation").pk]},
    )
    assert answer.status_code == 302, answer.content
    assert [role.name for role in membership.roles.all()] == ["implementation"]
    _verifier, challenge = pkce_pair()
    client = register_client(HttpClient())
    html = authorize(signed_in(dave), client.client_id, challenge).content.decode()
    assert f'value="{choice(alpha, "implementation")}"' in html
    assert f'value="{choice(alpha, "review")}"' not in html


def test_the_sign_in_an_app_sends_a_person_to_locks_out_like_the_portals(world, charlie, settings):
    settings.AXES_FAILURE_LIMIT = 3
    client = register_client(HttpClient())
    _verifier, challenge = pkce_pair()
    http = HttpClient()
    next_url = authorize(http, client.client_id, challenge)["Location"].split("next=", 1)[1]
    answers = [
        http.post(
            "/portal/sign-in/", {"username": "charlie", "password": "wrong", "next": next_url}
        )
        for _ in range(3)
    ]
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    locked = http.post(
        "/portal/sign-in/",
        {"username": "charlie", "password": "correct horse battery staple", "next": next_url},
    )
    assert locked.status_code == 429
    assert not ClientAuthorization.objects.exists()


def test_signing_in_from_the_apps_request_comes_back_to_its_consent_page(world, charlie):
    from urllib.parse import unquote

    client = register_client(HttpClient())
    _verifier, challenge = pkce_pair()
    http = HttpClient()
    next_url = unquote(
        authorize(http, client.client_id, challenge)["Location"].split("next=", 1)[1]
    )
    answer = http.post(
        "/portal/sign-in/",
        {"username": "charlie", "password": "correct horse battery staple", "next": next_url},
    )
    assert answer.status_code == 302
    assert answer["Location"].startswith("/oauth/authorize/?client_id=")
    assert "Allow" in http.get(answer["Location"]).content.decode()
