"""Every call is audited, even by a gateway killed with SIGKILL: a real gateway process (uvicorn)
journals each call record before it waits for its batch INSERT; killed before that INSERT, it
leaves the journal, and the next gateway process started on the same folder writes every record,
once. The journal's segments of a live process are never taken for a dead one's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from registry.gateway.models import ToolCall
from registry.gateway.services import ToolCallRecord
from tests.celery_worker import database_url
from tests.factories import AgentTokenFactory, TeamFactory
from tests.mcp_fixtures import free_port, wait_for_port
from tests.waiting import wait_for
from workers.gateway.call_journal import CallJournal, replay_orphans

REPO = Path(__file__).resolve().parents[2]
CALLS = 7


class GatewayProcess:
    """`uvicorn workers.gateway.asgi:application` on the test database, journaling to `journal`,
    writing its records only at shutdown (a flush interval far beyond the test)."""

    def __init__(self, journal: Path, log: Path) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "registry.settings",
            "TOOLROOM_PROFILE": "test",
            "DATABASE_URL": database_url(),
            "TOOLROOM_GATEWAY_JOURNAL_DIR": str(journal),
            "TOOLROOM_GATEWAY_AUDIT_FLUSH_SECONDS": "3600",
        }
        argv = [sys.executable, "-m", "uvicorn", "workers.gateway.asgi:application"]
        with log.open("a") as output:
            self.process = subprocess.Popen(
                [*argv, "--port", str(self.port)],
                cwd=REPO,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        wait_for_port(self.port, timeout=60)

    def call(self, token: str, name: str) -> int:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/v1/tools/{name}/call",
            data=json.dumps({"arguments": {}}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)


@pytest.mark.django_db(transaction=True)
@pytest.mark.processes
def test_the_calls_of_a_gateway_killed_with_sigkill_are_written_by_the_next_one(tmp_path):
    token = AgentTokenFactory(team=TeamFactory(slug="alpha")).plain
    journal = tmp_path / "journal"
    log = tmp_path / "gateway.log"

    first = GatewayProcess(journal, log)
    try:
        # Calls the gateway answers (refused: no such tool), each one audited.
        answers = [first.call(token, f"nowhere__tool_{n}") for n in range(CALLS)]
    finally:
        first.kill()  # before its batch INSERT: the records were only in its memory and journal
    assert set(answers) == {404}, log.read_text()[-3000:]
    assert ToolCall.objects.count() == 0

    second = GatewayProcess(journal, log)
    try:
        wait_for(
            lambda: ToolCall.objects.count() >= CALLS,
            timeout=30,
            what="the next gateway to write what the killed one journaled",
            log=log,
        )
    finally:
        second.stop()
    names = sorted(ToolCall.objects.values_list("name", flat=True))
    assert names == sorted(f"nowhere__tool_{n}" for n in range(CALLS))  # each once
    assert set(ToolCall.objects.values_list("outcome", flat=True)) == {"refused"}
    assert sorted(path.name for path in journal.iterdir()) == []  # written, and removed


@pytest.mark.django_db(transaction=True)
def test_a_replay_writes_each_record_once_and_never_takes_a_live_segment(tmp_path):
    live = CallJournal(tmp_path)
    record = ToolCallRecord(started_at=1.0, duration_ms=2.0, name="a__b", via="mcp", outcome="ok")
    live.append(record)

    def write(records):
        from registry.gateway.services import tool_calls_record

        return tool_calls_record(records=records)

    assert replay_orphans(tmp_path, write) == 0  # held by this live journal
    # Its process dies after its INSERT but before removing the segment: the segment is an
    # orphan whose record is already written.
    write([record])
    live.close(written=False)
    assert replay_orphans(tmp_path, write) == 1
    assert ToolCall.objects.filter(record_id=record.record_id).count() == 1
    assert list(tmp_path.glob("calls-*.jsonl")) == []
