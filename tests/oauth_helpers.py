"""Building blocks of the OAuth tests: PKCE pairs, a client registered through the real endpoint,
the authorization request, the consent form and the token exchange, through Django's test client."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import trustme
from django.test import Client as HttpClient

from registry.oauth.models import Client
from registry.oauth.tokens import gateway_resource_url

REDIRECT_URI = "http://127.0.0.1:33418/callback"


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    return verifier, challenge.decode()


def register_client(
    http: HttpClient, *, name: str = "Test client", redirect_uri: str = REDIRECT_URI
) -> Client:
    answer = http.post(
        "/oauth/register/",
        data=json.dumps(
            {
                "client_name": name,
                "redirect_uris": [redirect_uri],
                "grant_types": ["authorization_code", "refresh_token"],
                "token_endpoint_auth_method": "none",
            }
        ),
        content_type="application/json",
    )
    assert answer.status_code == 201, answer.content
    client: Client = Client.objects.get(client_id=answer.json()["client_id"])
    return client


def authorize_params(client_id: str, challenge: str, **extra: str) -> dict[str, str]:
    params = {
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "response_type": "code",
        "state": "state-123",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": gateway_resource_url(),
    }
    params.update(extra)
    return params


def authorize(http: HttpClient, client_id: str, challenge: str, **extra: str) -> Any:
    return http.get(
        "/oauth/authorize/?" + urlencode(authorize_params(client_id, challenge, **extra))
    )


def consent_form(page: Any) -> dict[str, str]:
    """The hidden fields the consent page carries (its authorization request)."""
    html = page.content.decode()
    fields = {}
    for name in (
        "client_id",
        "redirect_uri",
        "response_type",
        "state",
        "code_challenge",
        "code_challenge_method",
        "scope",
        "resource",
    ):
        marker = f'name="{name}" value="'
        start = html.index(marker) + len(marker)
        fields[name] = html[start : html.index('"', start)].replace("&amp;", "&")
    return fields


def redirect_query(answer: Any) -> dict[str, str]:
    assert answer.status_code == 302, answer.content
    location = answer["Location"]
    assert location.startswith(REDIRECT_URI), location
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


def allow(http: HttpClient, page: Any, choice: str) -> dict[str, str]:
    """Post the consent form with Allow for `choice` ("team_id:role_id"); the redirect's query."""
    return redirect_query(
        http.post("/oauth/authorize/", {**consent_form(page), "choice": choice, "allow": "1"})
    )


def exchange(http: HttpClient, client_id: str, code: str, verifier: str) -> Any:
    return http.post(
        "/oauth/token/",
        {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT_URI,
            "client_id": client_id,
            "code_verifier": verifier,
            "resource": gateway_resource_url(),
        },
    )


def refresh(http: HttpClient, client_id: str, refresh_token: str) -> Any:
    return http.post(
        "/oauth/token/",
        {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id},
    )


def sign_in_tokens(http: HttpClient, client: Client, choice: str) -> dict[str, Any]:
    """The whole flow for a signed-in person: authorize, consent, exchange. The token answer."""
    verifier, challenge = pkce_pair()
    page = authorize(http, client.client_id, challenge)
    remembered = page.status_code == 302
    query = redirect_query(page) if remembered else allow(http, page, choice)
    answer = exchange(http, client.client_id, query["code"], verifier)
    assert answer.status_code == 200, answer.content
    tokens: dict[str, Any] = answer.json()
    return tokens


def person_access_token(person: Any, team: Any, role: str = "operations") -> str:
    """The access token a person's MCP client holds after signing in to Toolroom and choosing
    the team's `role` at consent."""
    http = HttpClient()
    http.force_login(person)
    choice = f"{team.pk}:{team.roles.get(name=role).pk}"
    token: str = sign_in_tokens(http, register_client(HttpClient(), name="Editor"), choice)[
        "access_token"
    ]
    return token


class DocumentServer:
    """An HTTPS server on 127.0.0.1 answering each path with what a test put there."""

    def __init__(self, tmp_path: Any) -> None:
        self.ca = trustme.CA()
        self.ca_file = tmp_path / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.documents: dict[str, tuple[str, bytes]] = {}
        documents = self.documents

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                content_type, body = documents.get(self.path, ("text/plain", b""))
                self.send_response(200 if self.path in documents else 404)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"https://localhost:{self.httpd.server_address[1]}{path}"

    def put(self, path: str, document: Any, content_type: str = "application/json") -> str:
        body = document if isinstance(document, bytes) else json.dumps(document).encode()
        self.documents[path] = (content_type, body)
        return self.url(path)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
