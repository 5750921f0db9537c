"""ASGI entry point of the gateway process: `uvicorn workers.gateway.asgi:application`."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")
django.setup()

from workers.gateway.app import build_gateway_app  # noqa: E402 (needs Django set up)

application = build_gateway_app()
