"""Property: whatever the interleaving of publishes, polls, commits and crashes, a group sees
every message at least once, and in publish order once redeliveries are dropped."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from eventbus import InProcessBus, Message

operations = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.integers(1, 4)),
        st.tuples(st.just("poll"), st.integers(1, 5)),
        st.tuples(st.just("commit"), st.just(0)),
        st.tuples(st.just("crash"), st.just(0)),
    ),
    max_size=40,
)


async def run(ops: list[tuple[str, int]], keys: int) -> tuple[list[int], list[int]]:
    bus = InProcessBus(max_retained_per_topic=1_000)
    publisher = bus.publisher()
    await publisher.start()
    consumer = bus.consumer(["t"], "g")
    await consumer.start()
    published: list[int] = []
    delivered: list[int] = []
    for op, n in ops:
        if op == "publish":
            batch = [len(published) + i for i in range(n)]
            await publisher.publish([Message("t", str(v % keys), str(v).encode()) for v in batch])
            published.extend(batch)
        elif op == "poll":
            records = await consumer.poll(max_records=n, timeout_seconds=0)
            delivered.extend(int(r.value) for r in records)
        elif op == "commit":
            await consumer.commit()
        else:
            await consumer.stop()
            consumer = bus.consumer(["t"], "g")
            await consumer.start()
    while records := await consumer.poll(max_records=100, timeout_seconds=0):
        delivered.extend(int(r.value) for r in records)
    return published, delivered


@settings(max_examples=60, deadline=None)
@given(ops=operations, keys=st.integers(1, 3))
def test_at_least_once_in_order(ops: list[tuple[str, int]], keys: int) -> None:
    published, delivered = asyncio.run(run(ops, keys))

    first_seen = list(dict.fromkeys(delivered))
    assert first_seen == published
    # A redelivery restarts from a committed point, so every value seen again was seen before.
    assert set(delivered) == set(published)
