"""Toolroom's URL map: the admin (the vetting workplace), the API and its schema."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from registry.gateway.views import jwks_view

admin.site.site_header = "Toolroom"
admin.site.site_title = "Toolroom"
admin.site.index_title = "Registry administration"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False)),
    path("admin/", admin.site.urls),
    path(".well-known/jwks.json", jwks_view, name="jwks"),
    path("", include("registry.api.urls")),
]
