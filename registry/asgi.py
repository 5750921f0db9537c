"""ASGI entry point for Toolroom's web application."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")

application = get_asgi_application()
