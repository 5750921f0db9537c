"""Single sign-on into the portal with a real OpenID Connect provider (oidc-provider on Node.js,
see tests/oidc_fixtures.py): accounts made on first sign-in, never staff, matched by issuer and
subject; the teams claim becomes memberships; everything goes through Django's `authenticate()`."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in

from registry.portal.models import OidcIdentity
from registry.teams import services
from registry.teams.models import Membership, MembershipLevel
from tests.factories import TeamFactory, UserFactory
from tests.oidc_fixtures import oidc_provider, sign_in_at_provider  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def sso(settings, oidc_provider):  # noqa: F811
    for name, value in oidc_provider.django_settings().items():
        setattr(settings, name, value)
    settings.AUTHENTICATION_BACKENDS = [
        "django.contrib.auth.backends.ModelBackend",
        "registry.portal.oidc.PortalOidcBackend",
        "guardian.backends.ObjectPermissionBackend",
    ]
    return oidc_provider


@pytest.fixture
def teams(db):
    return {slug: TeamFactory(slug=slug) for slug in ("alpha", "beta", "gamma")}


def _sso_sign_in(client, login):
    start = client.get("/portal/oidc/authenticate/")
    assert start.status_code == 302
    callback = sign_in_at_provider(start["Location"], login)
    parts = urlsplit(callback)
    return client.get(f"{parts.path}?{parts.query}")


def test_the_sign_in_page_offers_single_sign_on_when_configured(client, sso):
    page = client.get("/portal/sign-in/").content.decode()
    assert "/portal/oidc/authenticate/" in page


def test_a_first_sso_sign_in_creates_a_member_from_the_teams_claim(client, sso, teams):
    signed_in = []
    user_logged_in.connect(lambda sender, user, **kw: signed_in.append(user), weak=False)

    answer = _sso_sign_in(client, "carol")

    assert answer.status_code == 302
    assert answer["Location"] == "/portal/"
    carol = get_user_model().objects.get(username="carol")
    assert carol.email == "carol@example.com"
    assert (carol.first_name, carol.last_name) == ("Carol", "Jones")
    assert not carol.is_staff
    assert not carol.is_superuser
    assert not carol.has_usable_password()
    assert signed_in == [carol]
    identity = OidcIdentity.objects.get(user=carol)
    assert (identity.issuer, identity.subject) == (sso.issuer, "carol")
    levels = dict(Membership.objects.filter(user=carol).values_list("team__slug", "level"))
    assert levels == {"alpha": MembershipLevel.MEMBER, "beta": MembershipLevel.OWNER}

    home = client.get("/portal/").content.decode()
    assert "Alpha" in home
    assert "Beta" in home
    assert client.get("/portal/teams/gamma/").status_code == 404
    assert client.get("/portal/teams/beta/owners/").status_code == 200
    assert client.get("/portal/teams/alpha/owners/").status_code == 403


def test_the_claim_is_the_source_of_truth_for_memberships_at_each_sign_in(client, sso, teams):
    _sso_sign_in(client, "carol")
    carol = get_user_model().objects.get(username="carol")
    services.team_member_set(actor="test", team=teams["gamma"], user=carol)
    client.logout()

    _sso_sign_in(client, "carol")

    assert set(Membership.objects.filter(user=carol).values_list("team__slug", flat=True)) == {
        "alpha",
        "beta",
    }
    assert OidcIdentity.objects.filter(user=carol).count() == 1
    assert get_user_model().objects.filter(email="carol@example.com").count() == 1


@pytest.mark.parametrize("prefix", ["", "toolroom-"])
def test_a_group_named_like_a_team_without_the_prefix_grants_nothing(client, sso, teams, prefix):
    """Issue 26, Low 8: with an empty prefix, any provider group named like a team's slug (or
    `slug:owner`) granted that membership. The settings refuse a claim without a prefix
    (tests/portal/test_portal_settings.py); without one at run time no group names a team."""
    from django.conf import settings

    settings.TOOLROOM_OIDC_TEAM_PREFIX = prefix

    assert _sso_sign_in(client, "trudy").status_code == 302

    trudy = get_user_model().objects.get(username="trudy")
    assert not Membership.objects.filter(user=trudy).exists()


def test_an_identity_never_takes_over_a_local_account_with_the_same_name(client, sso, alice):
    admin = UserFactory(username="admin", is_staff=True, is_superuser=True)

    _sso_sign_in(client, "admin")

    created = OidcIdentity.objects.get(subject="admin").user
    assert created.pk != admin.pk
    assert created.username == "admin-2"
    assert not created.is_staff
    assert client.get("/admin/").status_code == 302  # the admin stays closed to them


def test_a_disabled_account_cannot_sign_in_through_sso(client, sso, teams):
    _sso_sign_in(client, "mallory")
    mallory = OidcIdentity.objects.get(subject="mallory").user
    mallory.is_active = False
    mallory.save()
    client.logout()

    answer = _sso_sign_in(client, "mallory")

    assert answer.status_code == 302
    assert answer["Location"] == "/portal/sign-in/?sso=failed"
    assert "did not sign you in" in client.get(answer["Location"]).content.decode()
    assert client.get("/portal/").status_code == 302


def test_a_forged_callback_is_refused(client, sso):
    client.get("/portal/oidc/authenticate/")
    answer = client.get("/portal/oidc/callback/?code=forged&state=forged")
    assert answer.status_code in (302, 400)
    assert client.get("/portal/").status_code == 302
