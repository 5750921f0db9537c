"""ASGI entry point of the gateway process: `uvicorn workers.gateway.asgi:application`."""

import gc
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")
django.setup()

from registry.gateway.port import start_epoch_keeper  # noqa: E402 (needs Django set up)
from workers.gateway.app import build_gateway_app  # noqa: E402 (needs Django set up)

application = build_gateway_app()
start_epoch_keeper()  # the last confirmed state during a database outage (docs/operations.md)

# Everything made so far (Django, the SDK, pydantic's schemas: some 180,000 objects) lives as long
# as the process: keep it out of the cyclic garbage collector's full passes, which otherwise walk
# all of it (about 100 ms each) every time enough calls' objects have outlived the young
# generations (docs/gateway.md, "The endpoint").
gc.collect()
gc.freeze()
