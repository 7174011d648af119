"""The pipelined drain: batch k is marked sent while batch k+1 is read and published. A failure
mid-stream keeps every acknowledged batch marked and every other row waiting; rows are marked by
id, so a lower id committed late is still relayed; a pass behind a slow bus ends in time and the
next goes on at once; backoff and settings stay bounded."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import sqlalchemy as sa

from eventbus import InProcessBus, PublishError, Record, decode
from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.tables import outbox
from scheduler.adapters.events import OutboxRelay, RelayConfig
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from tests.scheduler.conftest import T0
from tests.scheduler.events.conftest import Store
from tests.scheduler.events.publishers import FailingOnCall, SlowBus


async def read_all(bus: InProcessBus) -> list[Record]:
    consumer = bus.consumer([SCHEDULE_EVENTS_TOPIC], "reader")
    await consumer.start()
    try:
        return await consumer.poll(max_records=1_000, timeout_seconds=0.05)
    finally:
        await consumer.stop()


async def test_a_refusal_mid_drain_keeps_acknowledged_batches_and_loses_nothing(
    store: Store,
) -> None:
    for i in range(10):
        await store.create(f"s{i}")
    order = [row.event_id for row in await store.outbox_rows()]
    bus = InProcessBus()
    inner = bus.publisher()
    await inner.start()
    relay = store.relay(FailingOnCall(inner, fail_on=3), batch_size=3)

    with pytest.raises(PublishError):
        await relay.drain()
    # Batches 1 and 2 (6 rows) were acknowledged and marked; the rest waits, in order.
    assert await store.unsent_event_ids() == order[6:]

    assert await relay.drain() == 4
    ids = [decode(r.value)["id"] for r in await read_all(bus)]
    assert ids == order  # each exactly once, in id order
    assert await store.unsent_event_ids() == []


async def test_drain_stops_after_max_batches(store: Store) -> None:
    for i in range(7):
        await store.create(f"s{i}")
    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    relay = store.relay(publisher, batch_size=2)
    assert await relay.drain(max_batches=2) == 4
    assert len(await store.unsent_event_ids()) == 3


async def test_a_pass_behind_a_slow_bus_ends_in_time_and_the_next_goes_on_at_once(
    store: Store,
) -> None:
    for i in range(20):
        await store.create(f"s{i}")
    order = [row.event_id for row in await store.outbox_rows()]
    bus = InProcessBus()
    inner = bus.publisher()
    await inner.start()
    slow = SlowBus(inner, seconds=4.0)  # 10 batches: 40 s in one pass without the bound
    relay = store.relay(slow, monotonic=slow.monotonic, batch_size=2, pass_seconds=10.0)
    passes: list[tuple[float | None, int, float]] = []
    while True:
        started, before = slow.now, slow.batches
        wait = await relay.step()
        passes.append((wait, slow.batches - before, slow.now - started))
        if wait is None:
            break
        assert len(passes) < 10, passes
    # No further batch is read after 10 s: the batch under way when the time is up is the last.
    assert passes == [(0.0, 4, 16.0), (0.0, 4, 16.0), (None, 2, 8.0)], passes
    ids = [decode(r.value)["id"] for r in await read_all(bus)]
    assert ids == order  # each exactly once, in id order
    assert await store.unsent_event_ids() == []


@pytest.mark.postgres
async def test_a_lower_id_committed_after_a_higher_one_is_still_relayed(
    store: Store,
) -> None:
    if not store.url.startswith("postgresql"):
        pytest.skip("SQLite has one writer: ids always commit in order")
    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    relay = store.relay(publisher)
    late = {
        "event_id": "evt_late",
        "topic": SCHEDULE_EVENTS_TOPIC,
        "key": "sch_late",
        "type": "schedule.updated",
        "payload": '{"id":"evt_late"}',
        "created_at": store.clock(),
    }
    async with store.engine.connect() as slow:
        await slow.execute(sa.insert(outbox), [late])  # takes the lower id, not committed yet
        await store.create("early")  # a higher id, committed first
        assert await relay.drain() == 1
        await slow.commit()
    rows = await store.outbox_rows()
    assert rows[0].event_id == "evt_late"  # it does hold the lower id
    assert await relay.drain() == 1  # a range-based mark would have lost it
    assert [decode(r.value, require_envelope=False)["id"] for r in await read_all(bus)][-1] == (
        "evt_late"
    )


async def test_the_loop_backs_off_doubling_with_jitter_capped_by_the_config(
    tmp_path: Path,
) -> None:
    config = RelayConfig(retry_initial_seconds=0.5, retry_max_seconds=30)
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'relay.db'}")
    relay = OutboxRelay(
        engine, InProcessBus().publisher(), clock=lambda: T0, config=config, rng=random.Random(7)
    )
    for failures, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (7, 30.0), (10_000, 30.0)]:
        delays = [relay.loop.backoff.delay(failures) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (failures, delays)
    await engine.dispose()


@pytest.mark.parametrize(
    "bad",
    [
        {"batch_size": 0},
        {"batch_size": 10_001},
        {"poll_interval_seconds": 0},
        {"retry_initial_seconds": 5, "retry_max_seconds": 1},
        {"pass_seconds": 0},
    ],
)
def test_unbounded_or_nonsensical_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RelayConfig(**bad)  # type: ignore[arg-type]
