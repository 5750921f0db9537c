"""What one replica passes another for a session (session_relay.py) is delivered in the order it
was sent, session by session: a call's log messages relayed to the replica holding the GET stream
reach the client in the server's order. Real Redis pub/sub; the delivering side is slow to take
the first message, as a busy GET stream is, which let the second overtake it (seen once in twenty
calls of tests/gateway/test_gateway_replica_logging.py)."""

from __future__ import annotations

import anyio
from redis import asyncio as aioredis

from workers.gateway.session_relay import REPLICA, Relay

REDIS_URL = "redis://127.0.0.1:6379/15"


async def _relayed(messages_per_session: int) -> dict[str, list[int]]:
    client = aioredis.Redis.from_url(REDIS_URL)
    relay = Relay(client, prefix="toolroom-test-relay:", url=REDIS_URL, timeout=5.0, ttl=60)
    delivered: dict[str, list[int]] = {"one": [], "two": []}
    everything = anyio.Event()

    async def deliver(session_id: str, message: dict[str, object]) -> None:
        number = int(str(message["n"]))
        if number == 0:  # the first of each session takes its time
            await anyio.sleep(0.3)
        delivered[session_id].append(number)
        if sum(map(len, delivered.values())) == 2 * messages_per_session:
            everything.set()

    relay.on_question = deliver
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(relay.listen, group, 0.1)
            channel = relay.channel(REPLICA)
            with anyio.fail_after(10):
                while (await client.pubsub_numsub(channel))[0][1] < 1:
                    await anyio.sleep(0.02)
            for number in range(messages_per_session):
                for session_id in ("one", "two"):
                    message = {"jsonrpc": "2.0", "method": "x", "n": number}
                    assert await relay._publish(REPLICA, "q", session_id, message)
            with anyio.fail_after(10):
                await everything.wait()
            group.cancel_scope.cancel()
    finally:
        await client.aclose()
    return delivered


def test_messages_of_a_session_are_delivered_in_the_order_they_were_sent():
    delivered = anyio.run(_relayed, 5)

    assert delivered == {"one": [0, 1, 2, 3, 4], "two": [0, 1, 2, 3, 4]}
