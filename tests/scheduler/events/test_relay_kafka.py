"""The outbox relay against a real Kafka-protocol broker (tansu) read with aiokafka: envelope,
key and order per schedule; a broker outage loses nothing and duplicates nothing; a relay killed
between publish and mark-sent republishes the same event ids."""

from __future__ import annotations

import asyncio

import pytest

from eventbus import PublishError, SeenIds, decode
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from tests.scheduler.events.conftest import Store
from tests.scheduler.events.publishers import CrashAfterPublish, RelayKilled, by_key
from tests.support.kafka import (
    WAIT_LIMIT,
    TansuBroker,
    create_topics,
    read_exactly,
    tansu_publisher,
)

pytestmark = pytest.mark.kafka


async def churn(store: Store, schedules: int, flips: int) -> list[str]:
    """`schedules` schedules, each paused and resumed `flips` times (1 + 2*flips events each),
    interleaved so that consecutive outbox rows belong to different schedules."""
    ids = [await store.create(f"s{i}", payload={"i": i}) for i in range(schedules)]
    for _ in range(flips):
        for schedule_id in ids:
            await store.pause(schedule_id)
        for schedule_id in ids:
            await store.resume(schedule_id)
    return ids


async def test_events_arrive_with_envelope_key_and_order_per_schedule(
    store: Store, tansu_broker: TansuBroker
) -> None:
    # 4 partitions: order can only hold per key, which is what the relay promises.
    await create_topics(tansu_broker.bootstrap, [SCHEDULE_EVENTS_TOPIC], partitions=4)
    ids = await churn(store, schedules=6, flips=2)
    rows = await store.outbox_rows()
    publisher = tansu_publisher(tansu_broker.bootstrap)
    await publisher.start()
    try:
        relay = store.relay(publisher, batch_size=7)  # several batches
        assert await relay.drain() == len(rows) == 30
    finally:
        await publisher.stop()

    records = await read_exactly(tansu_broker.bootstrap, SCHEDULE_EVENTS_TOPIC, 30)
    assert len(records) == 30
    assert {r.value.decode() for r in records} == {row.payload for row in rows}
    outbox_order = {key: [row.event_id for row in rows if row.key == key] for key in ids}
    for key, group in by_key(records).items():
        assert key in outbox_order
        assert len({r.partition for r in group}) == 1  # one key, one partition
        events = [decode(r.value) for r in group]
        assert all(e["schedule_id"] == key for e in events)
        assert [e["id"] for e in events] == outbox_order[key]
        assert [e["type"] for e in events] == [
            "schedule.created",
            "schedule.paused",
            "schedule.resumed",
            "schedule.paused",
            "schedule.resumed",
        ]


async def test_broker_outage_every_event_arrives_once_after_restart(
    store: Store, tansu_broker: TansuBroker
) -> None:
    await create_topics(tansu_broker.bootstrap, [SCHEDULE_EVENTS_TOPIC], partitions=2)
    publisher = tansu_publisher(tansu_broker.bootstrap)
    await publisher.start()
    relay = store.relay(publisher, retry_initial_seconds=0.05, retry_max_seconds=0.2)
    try:
        await store.create("before")
        assert await relay.drain() == 1

        tansu_broker.stop()
        ids = await churn(store, schedules=3, flips=1)  # 9 events while the broker is down
        with pytest.raises(PublishError):
            await relay.relay_batch()
        waiting = await store.unsent_event_ids()
        assert len(waiting) == 9
        lag = await relay.refresh_metrics()
        assert lag.unsent == 9
        assert relay.metrics.registry.get_sample_value("scheduler_outbox_unsent") == 9

        tansu_broker.start()  # memory storage: the broker comes back empty
        await create_topics(tansu_broker.bootstrap, [SCHEDULE_EVENTS_TOPIC], partitions=2)
        task = asyncio.create_task(relay.run())
        try:
            async with asyncio.timeout(WAIT_LIMIT):
                while await store.unsent_event_ids():
                    relay.wake()
                    await asyncio.sleep(0.05)  # polling the database for the loop's progress
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await publisher.stop()

    records = await read_exactly(tansu_broker.bootstrap, SCHEDULE_EVENTS_TOPIC, 9)
    got = [decode(r.value)["id"] for r in records]
    assert sorted(got) == sorted(waiting)  # every waiting event, none twice
    assert {r.key for r in records} == set(ids)
    assert (await relay.refresh_metrics()).unsent == 0


async def test_relay_killed_after_publish_republishes_the_same_ids(
    store: Store, tansu_broker: TansuBroker
) -> None:
    await create_topics(tansu_broker.bootstrap, [SCHEDULE_EVENTS_TOPIC], partitions=1)
    await churn(store, schedules=2, flips=1)
    expected = [row.event_id for row in await store.outbox_rows()]
    publisher = tansu_publisher(tansu_broker.bootstrap)
    await publisher.start()
    try:
        doomed = store.relay(CrashAfterPublish(publisher))
        with pytest.raises(RelayKilled):
            await doomed.relay_batch()
        await doomed.release_leadership()  # its process is gone: PostgreSQL drops its lock
        assert await store.unsent_event_ids() == expected
        assert await store.relay(publisher).drain() == len(expected)
    finally:
        await publisher.stop()

    records = await read_exactly(tansu_broker.bootstrap, SCHEDULE_EVENTS_TOPIC, 2 * len(expected))
    ids = [decode(r.value)["id"] for r in records]
    assert ids == expected + expected  # one partition: the republished copy follows in order
    seen = SeenIds()
    assert [i for i in ids if seen.add(i)] == expected  # dedup by id restores the stream
