"""Two Toolroom installations on one Docker engine and one host leave each other alone.

Installation B (a worker process of its own, killed) leaves what a dead worker leaves: its
server's container and its kept proxied network, its egress bridge (and a surplus one, as a
creation race leaves), and a local server process whose worker is gone. Installation A, this test
run, has the same leftovers. A real Celery worker of A then starts, and its start-up janitor (the
one that removed another installation's networks in the fault run) removes A's leftovers and
none of B's, although both use the same owner label (the host name). B's own janitor then
removes B's.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import docker.errors
import pytest

from tests.celery_worker import CeleryWorker
from workers.adapters.sandbox import networks, remove_orphans, remove_stale_egress
from workers.adapters.sandbox.janitor import remove_surplus_egress_networks
from workers.adapters.sandbox.spec import LABEL_INSTALLATION, LABEL_MANAGED, LABEL_ROLE
from workers.janitor import find_orphans, kill_orphans
from workers.launch import INSTALLATION_ENV, OWNER_ENV

pytestmark = [pytest.mark.containers, pytest.mark.workers, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]


class Leftovers:
    """What one installation's dead worker left on the engine and the host."""

    def __init__(self, engine, installation: str, image: str) -> None:
        self.installation = installation
        env = {**os.environ, "TOOLROOM_INSTALLATION": installation}
        owner = socket.gethostname()  # both installations' default owner
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.sandbox_dying_worker", owner, image],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "READY"
        finally:
            worker.kill()
            worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()
        ours = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_INSTALLATION}={installation}"]}
        deadline = time.monotonic() + 20  # the proxy and the holder follow their worker
        while len(engine.api.containers(all=True, filters=ours)) > 1:
            assert time.monotonic() < deadline, engine.api.containers(all=True, filters=ours)
            time.sleep(0.2)
        [self.container] = [c["Id"] for c in engine.api.containers(all=True, filters=ours)]
        # The server's kept proxied network (a dead worker's: an orphan, and no server of
        # installation A wants it).
        [self.kept] = [
            n["Id"]
            for n in engine.api.networks(filters=ours)
            if (n.get("Labels") or {}).get(LABEL_ROLE) != networks.ROLE_EGRESS_NETWORK
        ]
        [self.bridge] = [
            n["Id"] for n in networks.egress_networks(engine, installation=installation)
        ]
        # A surplus egress bridge, as workers racing to create it leave one.
        self.surplus = engine.api.create_network(
            f"{networks.EGRESS_NETWORK}-{installation}-late",
            labels={
                LABEL_MANAGED: "true",
                LABEL_ROLE: networks.ROLE_EGRESS_NETWORK,
                LABEL_INSTALLATION: installation,
            },
        )["Id"]
        # A local server process whose worker (the one killed above) is gone.
        self.process = subprocess.Popen(
            ["sleep", "600"],
            start_new_session=True,  # a process group of its own, as MCP servers get
            env={
                "PATH": os.environ["PATH"],
                OWNER_ENV: f"{socket.gethostname()}:{worker.pid}",
                INSTALLATION_ENV: installation,
            },
        )

    def remaining(self, engine) -> dict[str, object]:
        def exists(kind: str, ident: str) -> bool:
            try:
                getattr(engine.api, f"inspect_{kind}")(ident)
            except docker.errors.NotFound:
                return False
            return True

        return {
            "server container": exists("container", self.container),
            "kept network": exists("network", self.kept),
            "egress bridge": exists("network", self.bridge),
            "surplus bridge": exists("network", self.surplus),
            "server process": self.process.poll() is None,
        }

    def remove(self, engine) -> None:
        """What this installation's own janitor does, and its bridge removed by hand (no
        janitor removes the bridge in use)."""
        remove_orphans(installation=self.installation, engine=engine)
        remove_stale_egress({}, installation=self.installation, engine=engine)
        remove_surplus_egress_networks(installation=self.installation, engine=engine)
        networks.remove_network_when_empty(engine, self.bridge)
        kill_orphans(installation=self.installation)
        self.process.wait(timeout=10)


def test_a_worker_of_one_installation_cleans_up_only_its_own(engine, images, tmp_path):
    ours = Leftovers(engine, os.environ["TOOLROOM_INSTALLATION"], images.servers.reference)
    theirs = Leftovers(engine, "another-toolroom", images.servers.reference)
    try:
        assert find_orphans() == [ours.process.pid]  # this installation's only

        log = tmp_path / "worker.log"
        CeleryWorker(log).stop()  # its start-up janitor ran before it said "ready."

        assert "removed what dead workers left" in log.read_text(), log.read_text()[-3000:]
        assert ours.remaining(engine) == {
            "server container": False,
            "kept network": False,
            "egress bridge": True,  # the one in use stays
            "surplus bridge": False,
            "server process": False,
        }
        assert theirs.remaining(engine) == dict.fromkeys(theirs.remaining(engine), True)
        theirs.remove(engine)
        assert theirs.remaining(engine) == dict.fromkeys(theirs.remaining(engine), False)
    finally:
        for leftovers in (ours, theirs):
            leftovers.process.kill()
            leftovers.process.wait()
            with contextlib.suppress(docker.errors.NotFound):
                engine.api.remove_container(leftovers.container, force=True)
            for ident in (leftovers.kept, leftovers.surplus):
                networks.remove_network_when_empty(engine, ident)
        # The other installation's bridge (this one's stays, as in any run).
        networks.remove_network_when_empty(engine, theirs.bridge)
