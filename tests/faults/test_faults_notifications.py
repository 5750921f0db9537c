"""Nothing promised is lost: access requests made while the broker is down (a redis-server of the
test's own, stopped) still e-mail every admin who decides them and deliver every webhook, each
exactly once, once the broker is back: the outbox rows were written in the requests' own
transactions, and a real beat's sweep hands what is due to a real worker. /metrics shows the
backlog meanwhile."""

from __future__ import annotations

import importlib
from collections import Counter

import pytest
from django.apps import apps

from registry.core import task_queue
from registry.notifications import services as notifications
from registry.notifications.models import DeliveryState, EmailNotification, WebhookDelivery
from registry.teams import services
from tests.catalogue_helpers import READ, approved_server
from tests.celery_worker import CeleryBeat, CeleryWorker
from tests.notifications.test_notifications import (  # noqa: F401 (fixtures: the people, an inbox, a receiver)
    people,
    receiver,
    smtp_inbox,
)
from tests.owned_redis import OwnedRedis
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.workers,
    pytest.mark.usefixtures("redis_cache"),
]

REQUESTS = 5


@pytest.fixture
def own_broker(tmp_path, settings):
    broker = OwnedRedis(tmp_path / "broker")
    broker.start()
    settings.CELERY_BROKER_URL = broker.url
    task_queue._client.cache_clear()
    yield broker
    broker.stop()
    task_queue._client.cache_clear()


def _metric(client, name: str, kind: str) -> float:
    line = f'{name}{{kind="{kind}"}} '
    text = client.get("/metrics").content.decode()
    [value] = [row[len(line) :] for row in text.splitlines() if row.startswith(line)]
    return float(value)


def test_what_was_committed_while_the_broker_was_down_is_delivered_once_it_is_back(  # noqa: PLR0917 (fixtures)
    people,  # noqa: F811
    receiver,  # noqa: F811
    smtp_inbox,  # noqa: F811
    own_broker,
    client,
    tmp_path,
):
    notifications.webhook_endpoint_create(actor="admin", url=receiver.url)
    own_broker.stop()  # down at commit: every send after commit fails (and is logged)

    for number in range(REQUESTS):
        services.access_request_create(
            actor=people["requester"],
            team=people["team"],
            server=approved_server(f"clock-{number}", {"get_time": READ}),
            justification="we need the time",
        )

    assert EmailNotification.objects.filter(state=DeliveryState.PENDING).count() == REQUESTS
    assert WebhookDelivery.objects.filter(state=DeliveryState.PENDING).count() == REQUESTS
    assert _metric(client, "toolroom_notifications_pending", "email") == REQUESTS
    assert _metric(client, "toolroom_notifications_due", "webhook") == REQUESTS
    assert _metric(client, "toolroom_notifications_oldest_pending_seconds", "webhook") > 0

    own_broker.start()  # back, empty of those messages: they were never sent
    # The sweep's schedule, as the migration seeds it (this test's database was emptied).
    importlib.import_module("registry.notifications.migrations.0002_outbox").create_schedule(
        apps, None
    )
    environment = {
        "CELERY_BROKER_URL": own_broker.url,
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_inbox.port),
    }
    log = tmp_path / "processes.log"
    worker = CeleryWorker(log, env=environment)
    beat = CeleryBeat(log, env=environment)
    try:
        wait_for(
            lambda: (
                not EmailNotification.objects.exclude(state=DeliveryState.DELIVERED).exists()
                and not WebhookDelivery.objects.exclude(state=DeliveryState.DELIVERED).exists()
            ),
            timeout=120,
            what="every e-mail and webhook delivered by the sweep",
            log=log,
        )
        # A duplicate of every task, as a broker redelivering them would send: nothing more.
        for delivery in WebhookDelivery.objects.all():
            task_queue.send_now(task_queue.WEBHOOK_DELIVER, args=[delivery.pk])
        for email in EmailNotification.objects.all():
            task_queue.send_now(task_queue.NOTIFICATION_EMAIL, args=[email.pk])
        wait_for(
            lambda: log.read_text().count("succeeded in") >= 3 * REQUESTS,
            timeout=60,
            what="the duplicates to be done",
            log=log,
        )
    finally:
        beat.stop()
        worker.stop()

    # Every admin who decides got each request's e-mail exactly once, every webhook came once.
    copies = Counter((m["Message-ID"], m["X-Envelope-To"]) for m in smtp_inbox.messages)
    assert len(copies) == 2 * REQUESTS
    assert set(copies.values()) == {1}
    deliveries = Counter(headers["X-Toolroom-Delivery"] for _, headers, _ in receiver.requests)
    assert len(deliveries) == REQUESTS
    assert set(deliveries.values()) == {1}
    assert _metric(client, "toolroom_notifications_pending", "email") == 0
    assert _metric(client, "toolroom_notifications_pending", "webhook") == 0
