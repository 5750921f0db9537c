"""Client ID Metadata Documents: the client_id is the HTTPS address of a JSON document, served here
by a real TLS server whose test certificate authority (trustme) Toolroom is told to trust. A good
document signs the person in; a private, too large, non-JSON or foreign-named one is refused with
the reason, and nothing is registered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client as HttpClient

from registry.oauth import services as oauth_services
from registry.oauth.models import Client
from registry.teams import services
from registry.teams.models import MembershipLevel
from tests.factories import TeamFactory
from tests.oauth_helpers import (
    REDIRECT_URI,
    DocumentServer,
    allow,
    authorize,
    exchange,
    pkce_pair,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def documents(tmp_path, settings) -> Iterator[DocumentServer]:
    server = DocumentServer(tmp_path)
    settings.TOOLROOM_OAUTH_CIMD_CA_BUNDLE = str(server.ca_file)
    yield server
    server.close()


@pytest.fixture
def person(charlie, committed):
    with committed():
        alpha = TeamFactory(slug="alpha")
        services.team_member_set(
            actor="test", team=alpha, user=charlie, level=MembershipLevel.OWNER
        )
    http = HttpClient()
    http.force_login(charlie)
    return http, alpha


def metadata(client_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "client_name": "Editor from its own site",
        "redirect_uris": [REDIRECT_URI],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **extra,
    }


def refused(http: HttpClient, client_id: str) -> str:
    _verifier, challenge = pkce_pair()
    answer = authorize(http, client_id, challenge)
    assert answer.status_code == 400, answer.content
    assert not Client.objects.filter(client_id=client_id).exists()
    text: str = answer.content.decode().replace("&#x27;", "'")
    return text


def test_a_client_known_by_its_metadata_document_signs_a_person_in(documents, person):
    http, alpha = person
    client_id = documents.url("/editor.json")
    documents.put("/editor.json", metadata(client_id))
    verifier, challenge = pkce_pair()
    page = authorize(http, client_id, challenge)
    assert page.status_code == 200, page.content
    html = page.content.decode()
    assert "Editor from its own site" in html
    assert "Unverified" not in html
    query = allow(http, page, f"{alpha.pk}:{alpha.roles.get(name='review').pk}")
    answer = exchange(http, client_id, query["code"], verifier)
    assert answer.status_code == 200, answer.content
    client = Client.objects.get(client_id=client_id)
    assert client.registration_source == "cimd"
    assert client.cimd_expires_at is not None  # the document is cached, then fetched again


def test_a_metadata_document_on_a_private_address_is_refused(documents, person, settings):
    http, _alpha = person
    settings.TOOLROOM_ALLOWED_NETWORKS = []
    client_id = documents.put("/private.json", metadata(documents.url("/private.json")))
    assert "is a loopback address" in refused(http, client_id)


def test_a_metadata_document_that_is_too_large_is_refused(documents, person):
    http, _alpha = person
    client_id = documents.url("/large.json")
    documents.put("/large.json", metadata(client_id, padding="x" * 20_000))
    assert "exceeds the maximum allowed size" in refused(http, client_id)


def test_a_metadata_document_that_is_not_json_is_refused(documents, person):
    http, _alpha = person
    client_id = documents.put("/page.json", b"<html>hello</html>", content_type="text/html")
    assert "is not JSON" in refused(http, client_id)
    broken = documents.put("/broken.json", b"{not json")
    assert "is not valid JSON" in refused(http, broken)


def test_a_metadata_document_naming_another_client_id_is_refused(documents, person):
    http, _alpha = person
    client_id = documents.put("/other.json", metadata("https://elsewhere.example/client.json"))
    assert "names another client_id" in refused(http, client_id)


def test_metadata_documents_turned_off_by_the_admin_are_refused(documents, person, alice):
    http, _alpha = person
    oauth_services.registration_policy_update(
        actor=alice, metadata_documents=False, dynamic_registration=True
    )
    client_id = documents.url("/off.json")
    documents.put("/off.json", metadata(client_id))
    assert "turned off" in refused(http, client_id)
