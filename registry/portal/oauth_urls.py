"""The authorization server's routes, under the toolkit's URL namespace (its views reverse their
own names): metadata at the root (RFC 8414, RFC 9728 with the path-suffixed form), and under
`/oauth/` the portal's consent page (the authorization endpoint), the token, revocation and
registration endpoints."""

from __future__ import annotations

from django.urls import path
from oauth2_provider.views import DynamicClientRegistrationManagementView

from registry.oauth import views
from registry.portal.consent import ConsentView

app_name = "oauth2_provider"

urlpatterns = [
    path(
        ".well-known/oauth-authorization-server",
        views.ServerMetadataView.as_view(),
        name="oauth-server-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource",
        views.protected_resource_metadata_view,
        name="oauth-resource-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource/<path:resource_path>",
        views.protected_resource_metadata_view,
        name="oauth-resource-metadata-path",
    ),
    path("oauth/authorize/", ConsentView.as_view(), name="authorize"),
    path("oauth/token/", views.ToolroomTokenView.as_view(), name="token"),
    path("oauth/revoke/", views.ToolroomRevokeTokenView.as_view(), name="revoke-token"),
    path("oauth/register/", views.RegistrationView.as_view(), name="dcr-register"),
    path(
        "oauth/register/<str:client_id>/",
        DynamicClientRegistrationManagementView.as_view(),
        name="dcr-register-management",
    ),
]
