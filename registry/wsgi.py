"""WSGI entry point for Toolroom's web application."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")

application = get_wsgi_application()
