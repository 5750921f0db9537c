"""Issue 26 (the High) and issue 30, item 6: the client address is the socket's, or exactly what
the trusted proxies in front reported, for the sign-in lockout, DRF's throttles and the
token-failure throttles of the web and the gateway alike; and refused tokens are counted by
address and token prefix, so that one agent retrying a revoked token never locks out the valid
agents behind the same address.

The review's three attacks, each sent as the review sent it:
- 30 wrong passwords, each with a new `X-Forwarded-For`, were never locked out;
- the right password with a new `X-Forwarded-For` signed in while the real address was locked;
- 40 wrong agent tokens with rotating addresses all got plain 401s.
The first two went through uvicorn, which (with its default proxy headers on) replaced the
socket's address by the header's first entry; they are sent here to the web process as the
quickstart starts it (its own uvicorn options), and the third to both the web and the gateway.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
import pytest
import uvicorn
from django.test import RequestFactory
from django.urls import reverse

from registry.core.client_address import client_address, request_client_address
from registry.teams import services as team_services
from tests.factories import AgentTokenFactory, TeamFactory, UserFactory
from tests.gateway_helpers import RunningGateway
from tests.mcp_fixtures import free_port

PASSWORD = "correct horse battery staple"
UNKNOWN = "trm_0123456789ab_" + "A" * 43
QUICKSTART = Path(__file__).resolve().parents[2] / "scripts" / "quickstart.py"


def _quickstart_argv(name: str) -> list[str]:
    """The command line `make run` starts the process `name` (web, gateway) with."""
    spec = importlib.util.spec_from_file_location("toolroom_quickstart", QUICKSTART)
    assert spec is not None
    assert spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    (found,) = [c for c in module.quickstart_processes(port=free_port()) if c.name == name]
    return list(found.argv)


# --- The rule ------------------------------------------------------------------------------------


def test_without_trusted_proxies_the_socket_address_is_the_client():
    assert client_address(peer="10.0.0.1", forwarded_for=["1.2.3.4"], trusted_hops=0) == "10.0.0.1"


def test_with_one_trusted_proxy_what_it_appended_counts_not_what_the_client_wrote():
    # The client wrote "1.2.3.4, 5.6.7.8"; the proxy appended the address it saw, 203.0.113.9.
    header = ["1.2.3.4, 5.6.7.8, 203.0.113.9"]
    assert client_address(peer="10.0.0.1", forwarded_for=header, trusted_hops=1) == "203.0.113.9"
    assert client_address(peer="10.0.0.1", forwarded_for=header, trusted_hops=2) == "5.6.7.8"


def test_repeated_headers_are_read_in_order():
    headers = ["1.2.3.4", "203.0.113.9"]
    assert client_address(peer="10.0.0.1", forwarded_for=headers, trusted_hops=1) == "203.0.113.9"


@pytest.mark.parametrize(
    ("header", "hops"),
    [
        ([], 1),  # no header: the request did not come through the proxy
        (["1.2.3.4"], 2),  # fewer entries than proxies
        (["1.2.3.4, not-an-address"], 1),
    ],
)
def test_a_request_that_did_not_come_through_the_proxies_is_counted_by_its_socket(header, hops):
    assert client_address(peer="10.0.0.1", forwarded_for=header, trusted_hops=hops) == "10.0.0.1"


@pytest.mark.parametrize(
    ("entry", "address"),
    [
        ("[2001:db8::1]:4711", "2001:db8::1"),
        ("198.51.100.7:4711", "198.51.100.7"),
        (" ::1 ", "::1"),
    ],
)
def test_ports_and_brackets_are_taken_off(entry, address):
    assert client_address(peer="10.0.0.1", forwarded_for=[entry], trusted_hops=1) == address


def test_django_requests_follow_the_setting(settings):
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="1.2.3.4")
    settings.TOOLROOM_TRUSTED_PROXY_HOPS = 0
    assert request_client_address(request) == "10.0.0.1"
    settings.TOOLROOM_TRUSTED_PROXY_HOPS = 1
    assert request_client_address(request) == "1.2.3.4"


# --- The attacks, in the web process ---------------------------------------------------------


def _uvicorn_options(argv: list[str]) -> dict[str, Any]:
    """The options of a uvicorn command line as uvicorn itself reads them (its click command)."""
    start = argv.index("uvicorn") + 1
    params = uvicorn.main.make_context("uvicorn", argv[start:]).params
    return {
        "proxy_headers": params["proxy_headers"],
        "forwarded_allow_ips": params["forwarded_allow_ips"],
    }


class RunningWeb:
    """The web application (`registry.asgi`) under uvicorn in a thread of the test process,
    with the uvicorn options the quickstart starts it with."""

    def __init__(self) -> None:
        import threading
        import time

        from registry.asgi import application

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            application,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
            **_uvicorn_options(_quickstart_argv("web")),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="web", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the web process did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@pytest.fixture
def web():
    running = RunningWeb()
    yield running
    running.stop()


def _sign_in(http: httpx2.Client, base: str, password: str, forwarded_for: str) -> int:
    page = http.get(f"{base}/admin/login/")
    token = http.cookies["csrftoken"]
    assert re.search(r'name="csrfmiddlewaretoken"', page.text)
    answer = http.post(
        f"{base}/admin/login/",
        data={
            "username": "erin",
            "password": password,
            "next": "/admin/",
            "csrfmiddlewaretoken": token,
        },
        headers={"X-Forwarded-For": forwarded_for},
    )
    return answer.status_code


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
def test_rotating_x_forwarded_for_neither_escapes_nor_lifts_the_sign_in_lockout(web, settings):
    settings.AXES_FAILURE_LIMIT = 5
    UserFactory(username="erin", password=PASSWORD, is_staff=True, is_superuser=True)
    with httpx2.Client(follow_redirects=False, timeout=30) as http:
        answers = [
            _sign_in(http, web.base, "wrong", forwarded_for=f"198.51.100.{n}") for n in range(30)
        ]
        right = _sign_in(http, web.base, PASSWORD, forwarded_for="203.0.113.200")

    assert answers[:4] == [200] * 4  # the form again
    assert set(answers[4:]) == {429}  # locked out from the fifth: one address, whatever it wrote
    assert right == 429  # and a new header does not let the right password in either


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
def test_forty_wrong_tokens_with_rotating_addresses_are_throttled_by_the_web(web, settings):
    settings.TOOLROOM_THROTTLE_TOKEN_FAILURES = "30/min"
    with httpx2.Client(timeout=30) as http:
        answers = [
            http.get(
                f"{web.base}/api/v1/catalogue",
                headers={"Authorization": f"Bearer {UNKNOWN}", "X-Forwarded-For": f"10.9.0.{n}"},
            )
            for n in range(40)
        ]

    assert [a.status_code for a in answers] == [401] * 30 + [429] * 10
    assert int(answers[-1].headers["Retry-After"]) > 0


# --- Behind a trusted proxy ------------------------------------------------------------------


def _admin_sign_in(client, password, forwarded_for):
    return client.post(
        reverse("admin:login"),
        {"username": "erin", "password": password, "next": "/admin/"},
        REMOTE_ADDR="10.0.0.2",  # the proxy
        HTTP_X_FORWARDED_FOR=forwarded_for,
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("redis_cache")
def test_behind_one_proxy_the_lockout_counts_the_address_the_proxy_saw(client, settings):
    settings.TOOLROOM_TRUSTED_PROXY_HOPS = 1
    settings.AXES_FAILURE_LIMIT = 3
    UserFactory(username="erin", password=PASSWORD, is_staff=True, is_superuser=True)
    for n in range(3):  # what the client wrote changes, what the proxy appended does not
        _admin_sign_in(client, "wrong", forwarded_for=f"198.51.100.{n}, 203.0.113.5")

    assert _admin_sign_in(client, PASSWORD, "192.0.2.1, 203.0.113.5").status_code == 429
    # Another client behind the same proxy is not locked out.
    assert _admin_sign_in(client, PASSWORD, "203.0.113.6").status_code == 302


# --- A shared address is not a shared fate (issue 30, item 6) --------------------------------


@pytest.fixture
def agents(db):
    team = TeamFactory(slug="alpha")
    revoked = AgentTokenFactory(team=team, name="old-bot")
    team_services.agent_token_revoke(actor="test", token=revoked, reason="rotated")
    return {
        "revoked": revoked.plain,
        "valid": [AgentTokenFactory(team=team, name=f"bot-{n}").plain for n in range(2)],
    }


@pytest.mark.django_db
@pytest.mark.usefixtures("redis_cache")
def test_one_agent_retrying_a_revoked_token_does_not_lock_out_the_valid_agents_behind_it(
    client, agents, settings
):
    settings.TOOLROOM_THROTTLE_TOKEN_FAILURES = "30/min"

    def get(token):
        return client.get(
            "/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer {token}", REMOTE_ADDR="10.0.0.7"
        ).status_code

    revoked, valid = [], []
    for _ in range(40):
        revoked.append(get(agents["revoked"]))
        valid += [get(token) for token in agents["valid"]]

    assert revoked == [401] * 30 + [429] * 10
    assert set(valid) == {200}


@pytest.mark.django_db
@pytest.mark.usefixtures("redis_cache")
def test_made_up_prefixes_are_counted_together(client, settings):
    settings.TOOLROOM_THROTTLE_TOKEN_FAILURES = "3/min"
    answers = [
        client.get(
            "/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer trm_{n:012x}_" + "A" * 43
        ).status_code
        for n in range(4)
    ]
    assert answers == [401, 401, 401, 429]


@pytest.mark.django_db
@pytest.mark.usefixtures("redis_cache")
def test_a_valid_token_is_served_after_its_own_prefix_was_guessed_past_the_rate(
    client, agents, settings
):
    settings.TOOLROOM_THROTTLE_TOKEN_FAILURES = "3/min"
    token = agents["valid"][0]
    guess = token[: len("trm_") + 12 + 1] + "B" * 43

    def get(plain):
        return client.get("/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer {plain}").status_code

    assert [get(guess) for _ in range(4)] == [401, 401, 401, 429]
    assert get(token) == 200


# --- The gateway -----------------------------------------------------------------------------


@pytest.fixture
def gateway():
    """The gateway under uvicorn with the options the quickstart starts it with."""
    running = RunningGateway(**_uvicorn_options(_quickstart_argv("gateway")))
    yield running
    running.stop()


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_cache")
def test_the_gateway_throttles_a_revoked_token_and_serves_the_valid_ones_behind_it(
    gateway, agents, settings
):
    settings.TOOLROOM_THROTTLE_TOKEN_FAILURES = "30/min"

    def call(http, token, n):
        return http.post(
            f"{gateway.base}/api/v1/tools/nothing__here/call",
            json={"arguments": {}},
            headers={"Authorization": f"Bearer {token}", "X-Forwarded-For": f"10.9.1.{n}"},
        )

    revoked, valid = [], []
    with httpx2.Client(timeout=30) as http:
        for n in range(40):
            revoked.append(call(http, agents["revoked"], n))
            valid += [call(http, token, n).status_code for token in agents["valid"]]
        unknown = [call(http, UNKNOWN, n).status_code for n in range(31)]

    assert [a.status_code for a in revoked] == [401] * 30 + [429] * 10
    assert int(revoked[-1].headers["Retry-After"]) > 0
    assert revoked[-1].json()["error"]["code"] == "throttled"
    assert set(valid) == {404}  # authenticated: the tool does not exist for them
    assert unknown == [401] * 30 + [429]
