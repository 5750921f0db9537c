"""Server categories in the Django admin: renamed and reordered through the services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from registry.servers import services
from registry.servers.models import (
    Category,
)


@admin.register(Category)
class CategoryAdmin(admin.ModelAdmin[Category]):
    list_display = ["name", "slug", "description"]
    search_fields = ["name", "slug"]

    def get_prepopulated_fields(self, request: HttpRequest, obj: Category | None = None) -> Any:
        return {} if obj is not None else {"slug": ("name",)}

    def get_readonly_fields(self, request: HttpRequest, obj: Category | None = None) -> Any:
        # Agents filter their catalogue by the slug: it stays what it was created as.
        return ("slug",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: Category, form: Any, change: bool) -> None:
        """Through the services: audited, and catalogues showing the category follow a rename."""
        data = form.cleaned_data
        if change:
            services.category_update(
                actor=request.user,
                category=obj,
                name=data["name"],
                description=data.get("description", ""),
            )
        else:
            created = services.category_create(
                actor=request.user,
                slug=data["slug"],
                name=data["name"],
                description=data.get("description", ""),
            )
            obj.pk = created.pk
