"""Settings for the test suite: Toolroom's settings in the test profile unless told otherwise."""

import os

os.environ.setdefault("TOOLROOM_PROFILE", "test")
# The suite talks to a real Redis (broker and cache); each run keeps its keys apart so runs that
# share the server (CI twice, developers in parallel) never consume each other's tasks.
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
# Apart from each other too: a test that empties this run's cache (`test-<pid>:*`) must not take
# the broker's keys with it. It once did, and with them the worker-direct exchange's routing table
# (which a worker writes only as it starts): a runtime command sent to a worker's own queue was
# then dropped (tests/gateway/test_gateway_runtime.py, `shared_cache`).
os.environ.setdefault("TOOLROOM_BROKER_KEY_PREFIX", f"test-{os.getpid()}-broker:")
os.environ.setdefault("TOOLROOM_CACHE_PREFIX", f"test-{os.getpid()}")
# The sandbox's janitors touch only this run's containers and networks (another run, or a
# quickstart, may share the Docker engine); the worker processes a test starts inherit it.
os.environ.setdefault("TOOLROOM_INSTALLATION", f"test-{os.getpid()}")
# The gateways tests start keep their call records in memory: a journal left by one test would
# be replayed into the next one's database. The journal's own tests give it a folder of theirs.
os.environ.setdefault("TOOLROOM_GATEWAY_JOURNAL_DIR", "")
# Every test client comes from 127.0.0.1: the throttles' own tests lower these rates themselves;
# elsewhere wrong tokens and requests from earlier tests must not add up to a 429.
os.environ.setdefault("TOOLROOM_THROTTLE_TOKEN_FAILURES", "100000/min")
os.environ.setdefault("TOOLROOM_THROTTLE_ACCESS_REQUESTS", "100000/hour")
# The ASGI fast path reads only under a cache epoch confirmed within this time; a loaded machine
# may take more than the default second between the Django request that confirms it and the
# fast-path call a test makes. The fault tests do not lean on this timer: a restarted Redis is
# seen on connect and a failure drops trust at once (tests/faults/test_faults_cache.py).
os.environ.setdefault("TOOLROOM_CACHE_REVALIDATE_SECONDS", "30")
# No epoch keeper thread in the test process (an in-process web app would start one, querying
# the test database from a thread of its own); the outage test's processes turn it back on.
os.environ.setdefault("TOOLROOM_EPOCH_KEEPER", "false")

from registry.settings import *  # noqa: F403

if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    # A file, not memory: the tests that run a real worker process share the database with it.
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": str(DATA_DIR / f"test-{os.getpid()}.sqlite3")  # noqa: F405
    }
