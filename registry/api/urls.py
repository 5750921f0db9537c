"""Routes of the REST API (`/api/v1/`), the official-registry list (`/v0.1/`), schema and docs."""

from __future__ import annotations

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from registry.api.views.catalogue import (
    CatalogueView,
    ClientConfigView,
    OfficialServerListView,
    PreflightView,
)
from registry.api.views.explain import ExplainView
from registry.api.views.teams import (
    AccessRequestViewSet,
    AgentTokenViewSet,
    BrowseServerViewSet,
    GrantViewSet,
    TeamViewSet,
)
from registry.api.views.tools import ToolCallView

router = SimpleRouter(trailing_slash=False)
router.register("teams", TeamViewSet, basename="team")
router.register("servers", BrowseServerViewSet, basename="browse-server")
router.register("grants", GrantViewSet, basename="grant")
router.register("access-requests", AccessRequestViewSet, basename="access-request")
router.register("agents", AgentTokenViewSet, basename="agent")

api_v1 = [
    path("catalogue", CatalogueView.as_view(), name="catalogue"),
    path("catalogue/mcp.json", ClientConfigView.as_view(), name="catalogue-client-config"),
    path("catalogue/preflight", PreflightView.as_view(), name="catalogue-preflight"),
    path("catalogue/explain", ExplainView.as_view(), name="catalogue-explain"),
    path("tools/<str:name>/call", ToolCallView.as_view(), name="tool-call"),
    *router.urls,
]

urlpatterns = [
    path("api/v1/", include((api_v1, "api"), namespace="api")),
    path("v0.1/servers", OfficialServerListView.as_view(), name="official-servers"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
