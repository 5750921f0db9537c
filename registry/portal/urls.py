"""Routes of the team portal (`/portal/`), including the single sign-on callback."""

from __future__ import annotations

from django.urls import include, path

from registry.portal import consent, upstream_accounts, views

app_name = "portal"

urlpatterns = [
    path("", views.home, name="home"),
    path("sign-in/", views.SignInView.as_view(), name="sign-in"),
    path("sign-out/", views.SignOutView.as_view(), name="sign-out"),
    path("browse/", views.browse, name="browse"),
    path("apps/", consent.connected_apps, name="apps"),
    path("apps/<int:pk>/revoke/", consent.connected_app_revoke, name="app-revoke"),
    path("calls/", consent.my_calls, name="my-calls"),
    path("accounts/", upstream_accounts.upstream_accounts, name="upstream-accounts"),
    path("accounts/callback/", upstream_accounts.upstream_callback, name="upstream-callback"),
    path("accounts/<slug:slug>/link/", upstream_accounts.upstream_link, name="upstream-link"),
    path("accounts/<slug:slug>/secret/", upstream_accounts.upstream_secret, name="upstream-secret"),
    path("accounts/<slug:slug>/unlink/", upstream_accounts.upstream_unlink, name="upstream-unlink"),
    path("teams/<slug:slug>/", views.team_detail, name="team"),
    path("teams/<slug:slug>/requests/", views.access_requests, name="requests"),
    path(
        "teams/<slug:slug>/requests/<int:pk>/withdraw/",
        views.access_request_withdraw,
        name="request-withdraw",
    ),
    path("teams/<slug:slug>/owners/", views.owners, name="owners"),
    path("teams/<slug:slug>/owners/tokens/", views.agent_token_create, name="token-create"),
    path("teams/<slug:slug>/owners/members/", views.member_set, name="member-set"),
    path(
        "teams/<slug:slug>/owners/members/<int:pk>/level/",
        views.member_level,
        name="member-level",
    ),
    path(
        "teams/<slug:slug>/owners/members/<int:pk>/remove/",
        views.member_remove,
        name="member-remove",
    ),
    path(
        "teams/<slug:slug>/owners/tokens/<int:pk>/revoke/",
        views.agent_token_revoke,
        name="token-revoke",
    ),
    path(
        "teams/<slug:slug>/owners/tokens/<int:pk>/declare/",
        views.agent_token_declare,
        name="token-declare",
    ),
    path("teams/<slug:slug>/connect/", views.connect, name="connect"),
    path("teams/<slug:slug>/explain/", views.explain, name="explain"),
]

# mozilla-django-oidc's views (`oidc_authentication_init`, `oidc_authentication_callback`) keep
# their own names, outside the portal namespace, as the library reverses them.
oidc_urlpatterns = [path("portal/oidc/", include("mozilla_django_oidc.urls"))]
