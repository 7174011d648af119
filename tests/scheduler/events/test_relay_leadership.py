"""PostgreSQL replicas: one active relay per database (advisory lock); a standby publishes
nothing and takes over as soon as the leader's connection, and with it the lock, is gone."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from eventbus import InProcessBus, Record, decode
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from tests.scheduler.events.conftest import Store
from tests.support.pg import fresh_postgres_database

pytestmark = pytest.mark.postgres


@pytest.fixture
async def database_url() -> object:  # PostgreSQL only: SQLite runs a single relay
    async with fresh_postgres_database("relay") as url:
        yield url


async def read_all(bus: InProcessBus, count: int) -> list[Record]:
    consumer = bus.consumer([SCHEDULE_EVENTS_TOPIC], "reader")
    await consumer.start()
    try:
        records: list[Record] = []
        async with asyncio.timeout(10):
            while len(records) < count:
                records += await consumer.poll(max_records=count - len(records))
        records += await consumer.poll(timeout_seconds=0.05)
        return records
    finally:
        await consumer.stop()


async def test_only_the_lock_holder_relays_and_a_standby_takes_over(store: Store) -> None:
    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    leader, standby = store.relay(publisher), store.relay(publisher)
    await store.create("a")

    assert await leader.acquire_leadership()
    assert not await standby.acquire_leadership()
    assert await standby.relay_batch() == 0  # a standby publishes nothing
    assert standby.metrics.registry.get_sample_value("scheduler_outbox_relay_leader") == 0
    assert await leader.relay_batch() == 1
    assert leader.metrics.registry.get_sample_value("scheduler_outbox_relay_leader") == 1

    await leader.release_leadership()
    await store.create("b")
    assert await standby.relay_batch() == 1
    assert not await leader.acquire_leadership()
    assert [decode(r.value)["data"]["name"] for r in await read_all(bus, 2)] == ["a", "b"]


async def test_a_leader_whose_connection_dies_loses_the_lock_and_cannot_mark_rows(
    store: Store,
) -> None:
    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    leader, standby = store.relay(publisher), store.relay(publisher)
    assert await leader.acquire_leadership()
    await store.create("a")

    # The server ends the leader's session (a network cut, a killed backend).
    async with store.engine.connect() as admin:
        killed = await admin.scalar(
            sa.text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_locks "
                "WHERE locktype = 'advisory' AND granted AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            )
        )
    assert killed == 1

    with pytest.raises(sa.exc.DBAPIError):
        await leader.relay_batch()  # its work runs on the dead lock connection: it fails
    assert await standby.acquire_leadership()
    assert await standby.relay_batch() == 1
    assert await store.unsent_event_ids() == []


async def test_run_loops_of_two_replicas_publish_each_row_once(store: Store) -> None:
    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    relays = [store.relay(publisher, poll_interval_seconds=0.02) for _ in range(2)]
    tasks = [asyncio.create_task(r.run()) for r in relays]
    try:
        for i in range(20):
            await store.create(f"s{i}")
        records = await read_all(bus, 20)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert [decode(r.value)["data"]["name"] for r in records] == [f"s{i}" for i in range(20)]
    assert sum(r.is_leader for r in relays) == 0  # both let go of the lock on cancel
