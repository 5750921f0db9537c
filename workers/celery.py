"""The Celery app of Toolroom's workers, configured from Django settings (CELERY_ namespace)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")

app = Celery("toolroom")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])
