"""Issue 11, item 10: sign-in locks out after repeated failures (django-axes, through Django's
`authenticate`, so any sign-in page is covered); failed agent-token authentications are
throttled per client address (and token prefix) in the Redis cache; unknown token prefixes are
remembered so guesses do not reach the database every time."""

from __future__ import annotations

import pytest
from django.contrib.auth import authenticate
from django.test import RequestFactory
from django.urls import reverse

from registry.teams import services
from registry.teams.models import MembershipLevel
from tests.factories import TeamFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]

PASSWORD = "correct horse battery staple"
UNKNOWN = "trm_0123456789ab_" + "A" * 43


def _sign_in(client, username, password, address="10.1.2.3"):
    return client.post(
        reverse("admin:login"),
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
    )


def test_the_admin_sign_in_locks_out_after_five_failures(client, settings):
    settings.AXES_FAILURE_LIMIT = 5
    UserFactory(username="erin", is_staff=True, is_superuser=True)
    answers = [_sign_in(client, "erin", "wrong").status_code for _ in range(5)]
    assert answers == [200, 200, 200, 200, 429]  # the form again, then locked out

    locked = _sign_in(client, "erin", PASSWORD)

    assert locked.status_code == 429
    assert "_auth_user_id" not in client.session


def test_another_address_is_not_locked_out(client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    UserFactory(username="erin", is_staff=True, is_superuser=True)
    for _ in range(3):
        _sign_in(client, "erin", "wrong", address="10.9.9.9")

    assert _sign_in(client, "erin", PASSWORD, address="10.1.1.1").status_code == 302


def test_a_success_before_the_limit_resets_the_count(client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    UserFactory(username="erin", is_staff=True, is_superuser=True)
    _sign_in(client, "erin", "wrong")
    _sign_in(client, "erin", "wrong")
    assert _sign_in(client, "erin", PASSWORD).status_code == 302
    client.logout()
    _sign_in(client, "erin", "wrong")
    _sign_in(client, "erin", "wrong")

    assert _sign_in(client, "erin", PASSWORD).status_code == 302


def test_any_sign_in_through_authenticate_is_locked_out_alike(settings):
    """A people's sign-in page elsewhere (the team portal) calls authenticate(request, ...)."""
    settings.AXES_FAILURE_LIMIT = 2
    UserFactory(username="frank")
    factory = RequestFactory()

    def attempt(password):
        request = factory.post("/portal/sign-in/", REMOTE_ADDR="10.4.4.4")
        return authenticate(request, username="frank", password=password)

    assert attempt("wrong") is None
    assert attempt("wrong") is None
    assert attempt(PASSWORD) is None  # locked out: the right password no longer helps
    other = factory.post("/portal/sign-in/", REMOTE_ADDR="10.5.5.5")
    assert authenticate(other, username="frank", password=PASSWORD) is not None


@pytest.fixture
def three_failures_a_minute(settings):
    settings.TOOLROOM_THROTTLE_TOKEN_FAILURES = "3/min"


@pytest.fixture
def agent_token():
    team = TeamFactory(slug="alpha")
    owner = UserFactory(username="owner")
    services.team_member_set(actor="test", team=team, user=owner, level=MembershipLevel.OWNER)
    return services.agent_token_create(
        actor=owner, team=team, role=team.roles.get(name="review"), name="bot"
    ).plain


@pytest.mark.usefixtures("three_failures_a_minute")
def test_wrong_tokens_from_one_address_are_throttled(client, agent_token):
    def get(token, address):
        return client.get(
            "/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer {token}", REMOTE_ADDR=address
        )

    assert [get(UNKNOWN, "10.7.7.7").status_code for _ in range(3)] == [401, 401, 401]
    throttled = get(UNKNOWN, "10.7.7.7")
    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "throttled"
    assert int(throttled["Retry-After"]) > 0
    assert get(UNKNOWN, "10.8.8.8").status_code == 401  # another address is not throttled
    assert get(agent_token, "10.7.7.7").status_code == 200  # nor a good token from that one


@pytest.mark.usefixtures("three_failures_a_minute")
def test_good_tokens_are_not_counted(client, agent_token):
    for _ in range(5):
        response = client.get(
            "/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer {agent_token}", REMOTE_ADDR="10.6.6.6"
        )
        assert response.status_code == 200


@pytest.mark.usefixtures("no_periodic_queries")
def test_an_unknown_prefix_reaches_the_database_once(client, django_assert_num_queries):
    first = client.get("/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer {UNKNOWN}")
    assert first.status_code == 401

    with django_assert_num_queries(0):
        again = client.get("/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer {UNKNOWN}")
    assert again.status_code == 401


def test_a_new_token_is_usable_even_if_its_prefix_was_guessed_before(client, agent_token):
    prefix = agent_token.split("_")[1]
    guess = f"trm_{prefix}_" + "B" * 43
    assert client.get("/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer {guess}").status_code == 401
    assert (
        client.get("/api/v1/catalogue", HTTP_AUTHORIZATION=f"Bearer {agent_token}").status_code
        == 200
    )
