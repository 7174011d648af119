"""The outbox relay over the in-process bus (the embedded default), on SQLite and PostgreSQL:
every outbox row written by the real unit of work is published once, in id order, with its key
and envelope; failures leave rows waiting; a crash after publish republishes the same ids; sent
rows stay until the retention pass deletes them."""

from __future__ import annotations

import asyncio
import json

import pytest

from eventbus import InProcessBus, PublishError, Record, SeenIds, decode
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from scheduler.service_layer.retention import RetainedTable, RetentionPolicy, prune_once
from tests.scheduler.events.conftest import Store
from tests.scheduler.events.publishers import CrashAfterPublish, FailingFirst, RelayKilled, by_key

WAIT_LIMIT = 10.0  # seconds; bound on any wait for the bus


async def consume(bus: InProcessBus, count: int, group: str = "reader") -> list[Record]:
    consumer = bus.consumer([SCHEDULE_EVENTS_TOPIC], group)
    await consumer.start()
    records: list[Record] = []
    try:
        async with asyncio.timeout(WAIT_LIMIT):
            while len(records) < count:
                records += await consumer.poll(max_records=count - len(records))
        # Nothing beyond `count`: a duplicate would show up here.
        records += await consumer.poll(timeout_seconds=0.05)
    finally:
        await consumer.stop()
    return records


async def started(bus: InProcessBus):  # type: ignore[no-untyped-def]
    publisher = bus.publisher()
    await publisher.start()
    return publisher


async def make_history(store: Store) -> list[str]:
    """Three schedules; the second is paused and resumed: 5 events, 3 of them on one key."""
    ids = [await store.create(f"s{i}", payload={"n": i}) for i in range(3)]
    await store.pause(ids[1])
    await store.resume(ids[1])
    return ids


async def test_every_row_is_published_once_with_its_envelope_key_and_order(store: Store) -> None:
    ids = await make_history(store)
    bus = InProcessBus()
    relay = store.relay(await started(bus))

    assert await relay.drain() == 5
    assert await relay.drain() == 0  # all marked sent: nothing published twice

    records = await consume(bus, 5)
    rows = await store.outbox_rows()
    assert len(records) == len(rows) == 5
    # The published value is the outbox envelope byte for byte, in id order.
    assert [r.value.decode() for r in records] == [row.payload for row in rows]
    assert all(row.sent_at is not None for row in rows)
    for record in records:
        event = decode(record.value)
        assert record.key == event["schedule_id"]
        assert event["id"].startswith("evt_")
        assert event["tenant_id"] == "tenant-a"
    types = {
        key: [decode(r.value)["type"] for r in group] for key, group in by_key(records).items()
    }
    assert types[ids[1]] == ["schedule.created", "schedule.paused", "schedule.resumed"]
    assert types[ids[0]] == ["schedule.created"]


async def test_small_batches_keep_id_order_across_batch_boundaries(store: Store) -> None:
    schedule_id = await store.create("flappy")
    for _ in range(3):
        await store.pause(schedule_id)
        await store.resume(schedule_id)
    expected = [row.event_id for row in await store.outbox_rows()]
    bus = InProcessBus()
    relay = store.relay(await started(bus), batch_size=2)

    assert await relay.drain() == 7

    records = await consume(bus, 7)
    assert [decode(r.value)["id"] for r in records] == expected


async def test_a_refused_batch_stays_unsent_and_is_delivered_once_on_retry(store: Store) -> None:
    await make_history(store)
    bus = InProcessBus()
    publisher = FailingFirst(await started(bus), failures=2)
    relay = store.relay(publisher)

    for _ in range(2):
        with pytest.raises(PublishError):
            await relay.relay_batch()
        assert len(await store.unsent_event_ids()) == 5  # nothing marked, nothing lost

    assert await relay.relay_batch() == 5
    assert await store.unsent_event_ids() == []
    records = await consume(bus, 5)
    assert len({decode(r.value)["id"] for r in records}) == 5
    assert relay.metrics.publish_failures._value.get() == 2


async def test_killed_between_publish_and_mark_sent_republishes_the_same_ids(store: Store) -> None:
    await make_history(store)
    expected = {row.event_id for row in await store.outbox_rows()}
    bus = InProcessBus()
    publisher = await started(bus)
    doomed = store.relay(CrashAfterPublish(publisher))

    with pytest.raises(RelayKilled):
        await doomed.relay_batch()
    assert set(await store.unsent_event_ids()) == expected  # published but not marked
    await doomed.release_leadership()  # its process is gone: PostgreSQL drops its lock

    assert await store.relay(publisher).drain() == 5  # the next relay starts over

    records = await consume(bus, 10)
    ids = [decode(r.value)["id"] for r in records]
    assert len(ids) == 10
    assert set(ids) == expected
    seen = SeenIds()
    assert {i for i in ids if seen.add(i)} == expected  # ... and the id makes it detectable
    assert sum(seen.add(i) for i in ids) == 0


async def test_lag_metrics_count_unsent_rows_and_the_oldest_age(store: Store) -> None:
    await make_history(store)
    bus = InProcessBus()
    relay = store.relay(await started(bus))
    oldest = (await store.outbox_rows())[0].created_at
    store.clock.advance(seconds=90)

    lag = await relay.refresh_metrics()

    assert lag.unsent == 5
    expected_age = (store.clock.now - oldest).total_seconds()
    assert 90 <= lag.oldest_unsent_age_seconds <= expected_age + 0.01
    registry = relay.metrics.registry
    assert registry.get_sample_value("scheduler_outbox_unsent") == 5
    age = registry.get_sample_value("scheduler_outbox_oldest_unsent_age_seconds")
    assert age == lag.oldest_unsent_age_seconds

    await relay.drain()
    lag = await relay.refresh_metrics()
    assert (lag.unsent, lag.oldest_unsent_age_seconds) == (0, 0.0)
    assert registry.get_sample_value("scheduler_outbox_published_total") == 5


async def test_the_relay_keeps_sent_rows_and_retention_deletes_those_past_the_setting(
    store: Store,
) -> None:
    bus = InProcessBus()
    relay = store.relay(await started(bus))
    old = await store.create("old")
    await relay.drain()  # sent on day 0
    store.clock.advance(days=6)
    recent = await store.create("recent")
    await relay.drain()  # sent on day 6
    store.clock.advance(days=3)

    # Day 9: "old" was sent 9 days ago, past the 7-day default, yet the relay's loop steps
    # delete nothing: the relay only publishes and marks sent.
    for _ in range(3):
        assert await relay.step() is None
    assert [row.key for row in await store.outbox_rows()] == [old, recent]

    waiting = await store.create("waiting")  # never sent: no retention deletes it
    policy = RetentionPolicy()  # SCHEDULER_OUTBOX_RETENTION_SECONDS' default: 7 days

    report = await prune_once(store.uows, policy, store.clock())
    assert report.deleted == {RetainedTable.OUTBOX: 1}
    assert [row.key for row in await store.outbox_rows()] == [recent, waiting]

    store.clock.advance(days=400)
    await prune_once(store.uows, policy, store.clock())
    assert [row.key for row in await store.outbox_rows()] == [waiting]
    assert len(await store.unsent_event_ids()) == 1


async def test_run_loop_publishes_on_wake_without_waiting_for_the_poll_interval(
    store: Store,
) -> None:
    bus = InProcessBus()
    # A poll interval far beyond the wait below: only wake() can explain a prompt delivery.
    relay = store.relay(await started(bus), poll_interval_seconds=60)
    consumer = bus.consumer([SCHEDULE_EVENTS_TOPIC], "reader")
    await consumer.start()
    task = asyncio.create_task(relay.run())
    try:
        first = await store.create("first")
        relay.wake()
        records = await consumer.poll(timeout_seconds=WAIT_LIMIT)
        assert [r.key for r in records] == [first]
        await asyncio.sleep(0.05)  # let the loop go idle on its 60 s poll
        second = await store.create("second")
        relay.wake()
        records = await consumer.poll(timeout_seconds=5.0)
        assert [r.key for r in records] == [second]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await consumer.stop()


async def test_run_loop_retries_with_backoff_until_the_bus_takes_the_events(
    store: Store,
) -> None:
    await make_history(store)
    bus = InProcessBus()
    publisher = FailingFirst(await started(bus), failures=3)
    relay = store.relay(publisher, retry_initial_seconds=0.01, retry_max_seconds=0.02)
    task = asyncio.create_task(relay.run())
    try:
        records = await consume(bus, 5)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert publisher.refused == 3
    assert len({json.loads(r.value)["id"] for r in records}) == 5
    assert await store.unsent_event_ids() == []
