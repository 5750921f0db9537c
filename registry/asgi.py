"""ASGI entry point for Toolroom's web application."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")

django_application = get_asgi_application()

from registry.catalogue.fastpath import catalogue_fast_path  # noqa: E402 (needs Django set up)

application = catalogue_fast_path(django_application)
