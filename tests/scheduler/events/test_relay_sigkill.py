"""Fault proof with a real process: the outbox relay SIGKILLed between publish and
mark-sent republishes the same events (same id, same payload) after a restart; nothing is lost
and every row ends marked sent (DESIGN.md §9: at-least-once, consumers deduplicate by `id`).

To kill the relay at that exact point rather than by luck, the test holds a row lock on one
outbox row in the middle of the backlog. The relay reads without locks and publishes that row's
batch, then its UPDATE ... SET sent_at blocks on the lock: the batch is acknowledged by the
broker but not marked. Once the consumer has seen that row's event, the relay is killed. The relay
pipelines (batch k+1 is published while batch k is being marked), so the consumer then reads up
to the broker's end offsets before the test takes "published but not marked".
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from eventbus import SeenIds, decode
from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import outbox
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from tests.scheduler.conftest import StepClock
from tests.scheduler.events.conftest import Store
from tests.scheduler.events.publishers import by_key
from tests.scheduler.events.relay_process import Collector, RelayProcess
from tests.scheduler.runs.processes import wait_until
from tests.support.kafka import TansuBroker, create_topics, end_offsets
from tests.support.pg import fresh_postgres_database

pytestmark = [pytest.mark.postgres, pytest.mark.kafka, pytest.mark.slow]

SCHEDULES = 40  # x 3 events (created, paused, resumed) = 120 outbox rows
BATCH = 10  # rows per publish: the stall row sits in the 6th batch
WAIT = 45.0  # seconds; generous bound for a loaded 2-core machine


@pytest.fixture
async def pg_store() -> AsyncIterator[Store]:
    async with fresh_postgres_database("relaykill") as url:
        await upgrade(url)
        engine = create_engine(url)
        uows = SqlUnitOfWorkFactory(engine, SecretBox([b"k" * 32]))
        try:
            yield Store(url, engine, uows, StepClock())
        finally:
            await engine.dispose()


async def fill_outbox(store: Store) -> None:
    """Interleaved so that consecutive rows belong to different schedules."""
    ids = [await store.create(f"s{i}", payload={"i": i}) for i in range(SCHEDULES)]
    for schedule_id in ids:
        await store.pause(schedule_id)
    for schedule_id in ids:
        await store.resume(schedule_id)


async def test_relay_sigkilled_between_publish_and_mark_sent_republishes_same_ids(
    pg_store: Store, tansu_broker: TansuBroker, tmp_path: Path
) -> None:
    bootstrap = tansu_broker.bootstrap
    await create_topics(bootstrap, [SCHEDULE_EVENTS_TOPIC], partitions=2)
    await fill_outbox(pg_store)
    rows = await pg_store.outbox_rows()
    assert len(rows) == 3 * SCHEDULES
    payload_of = {r.event_id: r.payload for r in rows}
    stall_index = len(rows) // 2
    stall = rows[stall_index]

    collector = await Collector(bootstrap).start()
    lock = await pg_store.engine.connect()
    relays: list[RelayProcess] = []
    try:
        # The stall: a row lock the relay's mark-sent UPDATE must wait for (reads do not).
        await lock.execute(sa.select(outbox.c.id).where(outbox.c.id == stall.id).with_for_update())
        first = await RelayProcess(pg_store.url, bootstrap, tmp_path, BATCH).start()
        relays.append(first)

        async def stall_published() -> bool:
            await collector.poll()
            return stall.event_id in collector.counts()

        await wait_until(stall_published, WAIT, "the stall row's event on the broker")
        first.kill()
        await first.wait()
        await lock.rollback()  # the dead relay's UPDATE now runs and dies uncommitted

        unsent_at_kill = set(await pg_store.unsent_event_ids())
        # The relay pipelines: the batch after the stall's may be on the broker too. Read all
        # the dead relay published before taking what it published but did not mark.
        await collector.poll_to(await end_offsets(bootstrap, SCHEDULE_EVENTS_TOPIC), WAIT)
        seen_before_restart = set(collector.counts())
        published_not_marked = seen_before_restart & unsent_at_kill
        # The kill really fell between publish and mark-sent, and mid-backlog.
        assert stall.event_id in published_not_marked
        # Batches before the stall's were marked (the relay progressed up to it); the kill
        # left part of the backlog unsent.
        assert unsent_at_kill <= {r.event_id for r in rows[stall_index - BATCH + 1 :]}
        assert len(unsent_at_kill) < len(rows)

        second = await RelayProcess(pg_store.url, bootstrap, tmp_path, BATCH).start()
        relays.append(second)

        async def all_marked_sent() -> bool:
            return not await pg_store.unsent_event_ids()

        await wait_until(all_marked_sent, WAIT, "every outbox row marked sent after restart")

        async def all_arrived() -> bool:
            await collector.poll()
            return set(collector.counts()) >= set(payload_of)

        await wait_until(all_arrived, WAIT, "every outbox event on the broker")
        await collector.poll()  # a duplicate beyond the first copies would show up too
        second.terminate()
        assert await second.wait() == 0
    finally:
        await lock.close()
        await collector.stop()
        for relay in relays:
            await relay.aclose()

    counts = collector.counts()
    assert set(counts) == set(payload_of)  # nothing lost, nothing foreign
    duplicated = {event_id for event_id, n in counts.items() if n > 1}
    assert stall.event_id in duplicated  # republished after the restart...
    assert duplicated <= published_not_marked  # ...and only what was never marked sent
    assert max(counts.values()) == 2
    for record in collector.records:
        event = decode(record.value)
        # A duplicate carries the same id and the very same envelope as its outbox row.
        assert record.value.decode() == payload_of[event["id"]]
        assert event == json.loads(payload_of[event["id"]])
        assert record.key == event["schedule_id"]
    # Deduplicating by id restores each schedule's events in outbox order.
    for key, group in by_key(collector.records).items():
        seen = SeenIds()
        firsts = [i for i in (str(decode(r.value)["id"]) for r in group) if seen.add(i)]
        assert firsts == [r.event_id for r in rows if r.key == key]
