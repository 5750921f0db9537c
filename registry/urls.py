"""Toolroom's URL map: the admin (the vetting workplace), the team portal, the API, its schema,
the probes."""

from django.contrib import admin
from django.urls import include, path

from registry.gateway.views import jwks_view
from registry.operations.views import healthz, metrics, readyz
from registry.portal.urls import oidc_urlpatterns
from registry.portal.views import landing
from registry.teams.admin_search import admin_search_view

admin.site.site_header = "Toolroom"
admin.site.site_title = "Toolroom"
admin.site.index_title = "Registry administration"

urlpatterns = [
    # Staff land in the admin, everyone else in the team portal.
    path("", landing, name="landing"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    path("admin/search/", admin.site.admin_view(admin_search_view), name="admin_search"),
    path("admin/", admin.site.urls),
    path("portal/", include("registry.portal.urls")),
    # The OAuth 2.1 authorization server for people's MCP clients (docs/authentication.md).
    path("", include("registry.portal.oauth_urls")),
    *oidc_urlpatterns,
    path(".well-known/jwks.json", jwks_view, name="jwks"),
    path("", include("registry.api.urls")),
]

# Errors Django answers itself (no route, a bad request, a crash) keep the API's JSON shape; an
# address under /portal/ that does not exist gets the portal's own page.
handler400 = "registry.core.api_errors.api_bad_request"
handler403 = "registry.core.api_errors.api_permission_denied"
handler404 = "registry.portal.views.page_not_found"
handler500 = "registry.core.api_errors.api_server_error"
