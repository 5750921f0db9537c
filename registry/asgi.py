"""ASGI entry point for Toolroom's web application."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")

django_application = get_asgi_application()

from registry.api.fastpath import catalogue_fast_path  # noqa: E402 (needs Django set up)
from registry.core.cache import start_epoch_keeper  # noqa: E402
from registry.operations.metrics import catalogue_metrics  # noqa: E402

# Metrics count every catalogue request, whether the fast path or Django answers it.
application = catalogue_metrics(catalogue_fast_path(django_application))
# The last confirmed state during a database outage (docs/operations.md).
start_epoch_keeper()
