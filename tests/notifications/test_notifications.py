"""Access request notifications: e-mail through a real SMTP server (aiosmtpd on a free port) and
signed webhooks to a real HTTP receiver, through the outbox: rows written in the change's
transaction, one claimed attempt per task, retries due after their backoff and delivered by the
sweep, nothing sent twice.

Most tests record the tasks the control plane sends at `task_queue.send_now` (the boundary to the
broker) and run them with Celery's own `Task.apply`, as the worker would, and run the beat sweep
in this process with the clock moved past each backoff (`clock`); the last test sends them
through the real Redis broker to a real worker process
(tests.workers.test_worker_e2e's `worker`)."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth.models import Permission
from django.db import transaction

from registry.audit.models import AuditEvent
from registry.core import task_queue
from registry.core.errors import ApplicationError
from registry.notifications import services as notifications
from registry.notifications.models import DeliveryState, EmailNotification, WebhookDelivery
from registry.teams import services
from registry.teams.models import MembershipLevel
from tests.catalogue_helpers import READ, approved_server
from tests.factories import TeamFactory, UserFactory
from tests.mcp_fixtures import free_port
from tests.workers.test_worker_e2e import worker  # noqa: F401 (a fixture: a real Celery worker process)
from workers.notifications import notifications_deliver_due

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_cache")]


# --- A real SMTP server and a real HTTP receiver ------------------------------------------------


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.port = 0

    async def handle_DATA(self, server, session, envelope):
        message = message_from_bytes(envelope.original_content)
        message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        self.messages.append(message)
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_inbox(settings):
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    inbox.port = controller.port
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    yield inbox
    controller.stop()


class _Receiver:
    """Records every POST; answers with the scripted statuses, then 200."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.statuses: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests.append((self.path, dict(self.headers.items()), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, port or free_port()), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def receiver():
    running = _Receiver()
    yield running
    running.close()


@pytest.fixture
def sent_tasks(monkeypatch):
    """The tasks the control plane sends to the workers, once transactions commit."""
    sent: list[tuple[str, list[object]]] = []
    monkeypatch.setattr(
        task_queue, "send_now", lambda name, *, args=(), **options: sent.append((name, list(args)))
    )
    return sent


def run_tasks(sent_tasks, name=None):
    """Run the recorded tasks as the worker would (Celery's apply)."""
    from workers.tasks import notification_email, webhook_delivery

    tasks = {
        task_queue.NOTIFICATION_EMAIL: notification_email,
        task_queue.WEBHOOK_DELIVER: webhook_delivery,
    }
    results = []
    for task_name, args in list(sent_tasks):
        if name is None or task_name == name:
            results.append(tasks[task_name].apply(args=args))
    sent_tasks.clear()
    return results


# --- The people ---------------------------------------------------------------------------------


@pytest.fixture
def people(db):
    """Who decides access requests (and who does not), a team with a requester, a server."""
    deciders = [
        UserFactory(username="root", is_staff=True, is_superuser=True),
        UserFactory(username="granter", is_staff=True),
    ]
    deciders[1].user_permissions.add(
        Permission.objects.get(content_type__app_label="teams", codename="change_accessrequest")
    )
    UserFactory(username="viewer", is_staff=True)  # staff, may not decide
    UserFactory(username="quiet", is_staff=True, is_superuser=True, email="")  # no address
    UserFactory(username="former", is_staff=True, is_superuser=True, is_active=False)
    requester = UserFactory(username="rita")
    team = TeamFactory(slug="alpha", name="Alpha")
    other_team = TeamFactory(slug="beta", name="Beta")
    services.team_member_set(actor="test", team=team, user=requester, level=MembershipLevel.MEMBER)
    server = approved_server("clock", {"get_time": READ})
    return {
        "requester": requester,
        "team": team,
        "other_team": other_team,
        "server": server,
        "deciders": deciders,
    }


def _ask(people):
    return services.access_request_create(
        actor=people["requester"],
        team=people["team"],
        server=people["server"],
        justification="we need the time",
    )


# --- E-mail -------------------------------------------------------------------------------------


def test_a_new_request_emails_the_admins_who_decide_requests(people, smtp_inbox, sent_tasks):
    request = _ask(people)
    [notification] = EmailNotification.objects.all()
    assert sent_tasks == [(task_queue.NOTIFICATION_EMAIL, [notification.pk])]

    [result] = run_tasks(sent_tasks)

    assert result.get() == DeliveryState.DELIVERED
    to = sorted(m["X-Envelope-To"] for m in smtp_inbox.messages)
    assert to == ["granter@example.com", "root@example.com"]
    message = smtp_inbox.messages[0]
    assert message["Subject"] == "[Toolroom] Alpha asks for clock"
    assert message["Message-ID"].startswith(f"<{notification.message_id}@")
    body = message.get_payload()
    assert "rita asks, for the team Alpha, for clock." in body
    assert "we need the time" in body
    assert f"/admin/teams/accessrequest/{request.pk}/change/" in body
    notification.refresh_from_db()
    assert sorted(notification.sent_to) == ["granter@example.com", "root@example.com"]


@pytest.mark.parametrize(
    ("decide", "word"),
    [
        (
            lambda r: services.access_request_approve(actor="granter", request=r, note="ok"),
            "approved",
        ),
        (
            lambda r: services.access_request_deny(actor="granter", request=r, reason="use beta"),
            "denied",
        ),
    ],
)
def test_the_requester_is_emailed_the_decision(people, smtp_inbox, sent_tasks, decide, word):
    request = _ask(people)
    sent_tasks.clear()

    decide(request)
    run_tasks(sent_tasks)

    [message] = smtp_inbox.messages
    assert message["X-Envelope-To"] == "rita@example.com"
    assert message["Subject"] == f"[Toolroom] Your request for clock was {word}"
    assert f"was {word} by granter" in message.get_payload()
    assert "/portal/teams/alpha/requests/" in message.get_payload()
    if word == "denied":
        assert "Reason: use beta" in message.get_payload()


def test_a_change_that_rolls_back_tells_no_one(people, sent_tasks):
    def ask_then_fail():
        with transaction.atomic():
            _ask(people)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        ask_then_fail()
    assert sent_tasks == []
    assert not EmailNotification.objects.exists()


def test_an_smtp_server_that_is_down_is_retried_with_backoff_then_sent(
    people, settings, sent_tasks, smtp_inbox, clock
):
    inbox_port = settings.EMAIL_PORT
    settings.EMAIL_PORT = free_port()  # nothing listens there
    _ask(people)

    assert run_tasks(sent_tasks)[0].get() == DeliveryState.PENDING
    notification = EmailNotification.objects.get()
    assert (notification.attempts, notification.sent_to) == (1, [])
    assert "ConnectionRefusedError" in notification.last_error
    assert notification.last_attempt_at is not None
    waited = (notification.next_attempt_at - notification.last_attempt_at).total_seconds()
    assert 27 <= waited <= 33  # 30 s, +-10 %
    assert notifications_deliver_due() == {}  # not due yet

    settings.EMAIL_PORT = inbox_port  # the mail server is back
    clock.advance(34)
    assert notifications_deliver_due() == {"email delivered": 1}
    assert len(smtp_inbox.messages) == 2
    assert EmailNotification.objects.get().attempts == 2


def test_mail_that_keeps_failing_ends_failed_and_an_admin_can_make_it_due_again(
    people, settings, sent_tasks, clock
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()
    _ask(people)
    run_tasks(sent_tasks)
    for _ in range(notifications.EMAIL_MAX_ATTEMPTS - 1):
        clock.advance(notifications.BACKOFF_MAX_SECONDS * 1.2)
        notifications_deliver_due()

    notification = EmailNotification.objects.get()
    assert (notification.state, notification.attempts) == (
        DeliveryState.FAILED,
        notifications.EMAIL_MAX_ATTEMPTS,
    )
    assert notifications.notifications_retry(actor="admin", entries=[notification]) == 1
    notification.refresh_from_db()
    assert (notification.state, notification.attempts) == (DeliveryState.PENDING, 0)
    assert AuditEvent.objects.filter(action="notification.retried").count() == 1


# --- Webhooks -----------------------------------------------------------------------------------


def _verify(secret, headers, body):
    stamp, signature = (
        part.split("=", 1)[1] for part in headers["X-Toolroom-Signature"].split(",")
    )
    expected = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(signature, expected)


def test_team_and_global_webhooks_get_signed_events(people, receiver, sent_tasks):
    team_hook = notifications.webhook_endpoint_create(
        actor="admin", url=f"{receiver.url}/team", team=people["team"]
    )
    global_hook = notifications.webhook_endpoint_create(actor="admin", url=f"{receiver.url}/all")
    notifications.webhook_endpoint_create(
        actor="admin", url=f"{receiver.url}/other", team=people["other_team"]
    )

    request = _ask(people)
    run_tasks(sent_tasks, task_queue.WEBHOOK_DELIVER)

    assert sorted(path for path, _, _ in receiver.requests) == ["/all", "/team"]
    for path, headers, body in receiver.requests:
        secret = team_hook.secret if path == "/team" else global_hook.secret
        assert _verify(secret, headers, body)
        assert not _verify("whsec_wrong", headers, body)
        assert headers["X-Toolroom-Event"] == "access_request.created"
        payload = json.loads(body)
        assert payload["access_request"]["id"] == request.pk
        assert payload["access_request"]["team"] == "alpha"
        assert payload["access_request"]["requested_by"] == "rita"
    assert set(WebhookDelivery.objects.values_list("state", flat=True)) == {DeliveryState.DELIVERED}

    services.access_request_deny(actor="granter", request=request, reason="no")
    run_tasks(sent_tasks, task_queue.WEBHOOK_DELIVER)
    decided = [json.loads(body) for _, _, body in receiver.requests[2:]]
    assert {p["event"] for p in decided} == {"access_request.denied"}
    assert {p["access_request"]["decision_reason"] for p in decided} == {"no"}


def test_a_failing_receiver_is_retried_with_backoff_until_it_accepts(
    people, receiver, sent_tasks, clock
):
    notifications.webhook_endpoint_create(actor="admin", url=receiver.url, team=people["team"])
    receiver.statuses = [503, 429]  # then 200
    _ask(people)

    [_, result] = run_tasks(sent_tasks)  # the e-mail, then the delivery
    assert result.get() == DeliveryState.PENDING
    delivery = WebhookDelivery.objects.get()
    assert delivery.last_attempt_at is not None
    waited = (delivery.next_attempt_at - delivery.last_attempt_at).total_seconds()
    assert 13.5 <= waited <= 16.5  # 15 s, +-10 %
    assert notifications_deliver_due() == {}  # not due yet
    clock.advance(17)
    assert notifications_deliver_due() == {"webhook pending": 1}  # 429: 30 s more
    clock.advance(34)
    assert notifications_deliver_due() == {"webhook delivered": 1}

    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("delivered", 3, 200)
    ids = {headers["X-Toolroom-Delivery"] for _, headers, _ in receiver.requests}
    assert ids == {str(delivery.delivery_id)}  # one delivery id: receivers can de-duplicate
    clock.advance(3600)
    assert notifications_deliver_due() == {}  # delivered: never again
    assert len(receiver.requests) == 3


def test_a_receiver_that_keeps_failing_ends_failed_after_the_last_attempt(
    people, receiver, sent_tasks, clock
):
    notifications.webhook_endpoint_create(actor="admin", url=receiver.url)
    receiver.statuses = [500] * 20
    _ask(people)

    run_tasks(sent_tasks)
    for _ in range(notifications.WEBHOOK_MAX_ATTEMPTS):
        clock.advance(notifications.BACKOFF_MAX_SECONDS * 1.2)
        notifications_deliver_due()

    delivery = WebhookDelivery.objects.get()
    assert delivery.state == DeliveryState.FAILED
    assert delivery.attempts == notifications.WEBHOOK_MAX_ATTEMPTS
    assert len(receiver.requests) == notifications.WEBHOOK_MAX_ATTEMPTS
    assert delivery.last_error == "The receiver answered 500."


def test_a_refusal_is_not_retried(people, receiver, sent_tasks):
    notifications.webhook_endpoint_create(actor="admin", url=receiver.url)
    receiver.statuses = [410]
    _ask(people)
    run_tasks(sent_tasks, task_queue.WEBHOOK_DELIVER)
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts) == (DeliveryState.FAILED, 1)
    assert len(receiver.requests) == 1


def test_a_row_another_worker_holds_is_not_sent_again(people, receiver, sent_tasks, clock):
    """A redelivered task, a second worker or the sweep meet a claimed row: nothing is sent;
    once the claim's holder is gone (its lease passed) the row is delivered, once."""
    notifications.webhook_endpoint_create(actor="admin", url=receiver.url)
    _ask(people)
    [delivery] = WebhookDelivery.objects.all()
    run_tasks(sent_tasks, task_queue.NOTIFICATION_EMAIL)
    sent_tasks.append((task_queue.WEBHOOK_DELIVER, [delivery.pk]))
    assert notifications._claim(WebhookDelivery, delivery.pk) is not None  # a worker took it

    sent_tasks.extend(sent_tasks)  # the task, and a redelivered copy
    assert [r.get() for r in run_tasks(sent_tasks)] == [DeliveryState.PENDING] * 2
    assert notifications_deliver_due() == {}
    assert receiver.requests == []

    clock.advance(notifications.CLAIM_SECONDS + 1)  # that worker died
    assert notifications_deliver_due() == {"webhook delivered": 1}
    sent_tasks.append((task_queue.WEBHOOK_DELIVER, [delivery.pk]))
    assert run_tasks(sent_tasks)[0].get() == DeliveryState.DELIVERED  # a late duplicate
    assert len(receiver.requests) == 1


def test_the_address_checked_is_the_address_connected(people, settings, sent_tasks, monkeypatch):
    """DNS rebinding: the receiver's name resolves to an allowed address when the guard looks
    and to an internal one a moment later. No DNS server can be reconfigured here (the resolver
    is the machine's), so the lookups are answered in this process by a stand-in for such a
    server: `socket.getaddrinfo` answers 127.0.0.2 (the "public" address, the only one
    TOOLROOM_ALLOWED_NETWORKS lets through) on the first lookup of the name and 127.0.0.1 (the
    internal one) on every later lookup. A real receiver listens on each address, same port."""
    port = free_port()
    public = _Receiver("127.0.0.2", port)
    internal = _Receiver("127.0.0.1", port)
    settings.TOOLROOM_ALLOWED_NETWORKS = ["127.0.0.2/32"]
    real_getaddrinfo = socket.getaddrinfo
    lookups: list[str] = []

    def rebinding(host, *args, **kwargs):
        if host in ("rebind.test", b"rebind.test"):
            lookups.append("public" if not lookups else "internal")
            host = "127.0.0.2" if len(lookups) == 1 else "127.0.0.1"
        return real_getaddrinfo(host, *args, **kwargs)

    try:
        notifications.webhook_endpoint_create(actor="admin", url=f"http://rebind.test:{port}/hook")
        _ask(people)
        monkeypatch.setattr(socket, "getaddrinfo", rebinding)

        [result] = run_tasks(sent_tasks, task_queue.WEBHOOK_DELIVER)

        assert internal.requests == []
        assert len(public.requests) == 1
        assert result.get() == DeliveryState.DELIVERED
        assert lookups == ["public"]  # one lookup: the one checked is the one connected
    finally:
        public.close()
        internal.close()


def test_webhook_urls_pass_the_network_guard(people, settings):
    with pytest.raises(ApplicationError, match=r"169\.254\.169\.254"):
        notifications.webhook_endpoint_create(actor="admin", url="http://169.254.169.254/hook")
    with pytest.raises(ApplicationError):
        notifications.webhook_endpoint_create(actor="admin", url="ftp://example.com/hook")
    settings.TOOLROOM_ALLOWED_NETWORKS = []
    with pytest.raises(ApplicationError):
        notifications.webhook_endpoint_create(actor="admin", url="http://127.0.0.1:9/hook")


def test_rotating_the_secrets_key_re_encrypts_webhook_secrets(settings):
    import io

    from cryptography.fernet import Fernet
    from django.core.management import call_command

    from registry.core.secret_fields import decrypt_text
    from registry.notifications.models import WebhookEndpoint

    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.TOOLROOM_SECRETS_KEYS = [old]
    created = notifications.webhook_endpoint_create(actor="admin", url="https://example.com/hook")
    settings.TOOLROOM_SECRETS_KEYS = [new, old]
    out = io.StringIO()
    call_command("rotate_secrets_key", stdout=out)
    assert "signing secrets of 1 webhook(s)" in out.getvalue()
    settings.TOOLROOM_SECRETS_KEYS = [new]
    stored = WebhookEndpoint.objects.get(pk=created.endpoint.pk).secret_encrypted
    assert decrypt_text(stored) == created.secret


# --- Through a real worker ----------------------------------------------------------------------


@pytest.fixture
def mail_worker(monkeypatch, smtp_inbox, request):
    """A real Celery worker (tests.workers.test_worker_e2e's), its e-mail to `smtp_inbox`."""
    monkeypatch.setenv("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
    monkeypatch.setenv("EMAIL_HOST", "127.0.0.1")
    monkeypatch.setenv("EMAIL_PORT", str(smtp_inbox.port))
    return request.getfixturevalue("worker")


@pytest.mark.workers
def test_a_real_worker_sends_the_email_and_delivers_the_webhook(
    people, receiver, smtp_inbox, mail_worker
):
    from tests.waiting import wait_for as _wait_for

    hook = notifications.webhook_endpoint_create(actor="admin", url=receiver.url)
    request = _ask(people)  # committed: the tasks go to the broker

    _wait_for(
        lambda: WebhookDelivery.objects.filter(state=DeliveryState.DELIVERED).exists(),
        timeout=60,
        what="the webhook delivery",
        log=mail_worker["log"],
    )
    [(_, headers, body)] = receiver.requests
    assert _verify(hook.secret, headers, body)
    assert json.loads(body)["access_request"]["id"] == request.pk
    _wait_for(
        lambda: len(smtp_inbox.messages) == 2,
        timeout=60,
        what="the two e-mails",
        log=mail_worker["log"],
    )
    assert sorted(m["X-Envelope-To"] for m in smtp_inbox.messages) == [
        "granter@example.com",
        "root@example.com",
    ]


def test_the_admin_shows_the_backlog_and_sends_failed_ones_again(people, sent_tasks, client, alice):
    _ask(people)
    EmailNotification.objects.update(state=DeliveryState.FAILED, attempts=7)
    failed = EmailNotification.objects.get()
    client.force_login(alice)

    def text(response) -> str:
        assert response.status_code == 200
        return " ".join(response.content.decode().split())

    page = text(client.get("/admin/notifications/emailnotification/"))
    assert "Backlog: <strong>0</strong> waiting (0 due now);" in page
    answer = text(
        client.post(
            "/admin/notifications/emailnotification/",
            {"action": "retry_selected", "_selected_action": [failed.pk]},
            follow=True,
        )
    )
    assert "1 failed notification(s) are due again." in answer
    assert "Backlog: <strong>1</strong> waiting (1 due now, the oldest written" in answer
    failed.refresh_from_db()
    assert (failed.state, failed.attempts) == (DeliveryState.PENDING, 0)
