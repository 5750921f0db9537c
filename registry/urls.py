"""Toolroom's URL map: the admin (the vetting workplace), the API and its schema, the probes."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from registry.core.views import healthz, metrics, readyz

admin.site.site_header = "Toolroom"
admin.site.site_title = "Toolroom"
admin.site.index_title = "Registry administration"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False)),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("", include("registry.api.urls")),
]
