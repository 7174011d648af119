"""The consumer-group path on a real Kafka-protocol broker (tansu): a consumer that dies after
inserting deliveries but before committing its offsets loses nothing and duplicates nothing."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from eventbus import KafkaConsumer, KafkaPublisher, Message
from eventbus.messages import Record
from eventbus.ports import Consumer
from notification.entrypoints.workers import EventFanOutWorker
from tests.notification.api import deliveries, subscribe
from tests.notification.conftest import Harness
from tests.notification.events import schedule_event
from tests.support.kafka import FAST_GROUP_JOIN, create_topics

pytestmark = pytest.mark.kafka
# Bound on waiting for a group join and fetch on a shared 2-core machine.
POLL_DEADLINE_SECONDS = 20.0


class Crash(Exception):
    pass


class CrashOnCommit:
    """Wraps a real consumer; `commit` raises as if the process died right there."""

    def __init__(self, inner: Consumer) -> None:
        self.inner = inner

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def poll(self, *, max_records: int = 500, timeout_seconds: float = 1.0) -> list[Record]:
        return await self.inner.poll(max_records=max_records, timeout_seconds=timeout_seconds)

    async def commit(self) -> None:
        raise Crash


def consumer(bootstrap: str, topic: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(bootstrap, [topic], group, **FAST_GROUP_JOIN)


async def run_until_records(worker: EventFanOutWorker, expected: int) -> int:
    """Poll until `expected` records were handled (the group join takes about a second)."""
    handled, deadline = 0, time.monotonic() + POLL_DEADLINE_SECONDS
    while handled < expected and time.monotonic() < deadline:
        handled += await worker.run_once(timeout_seconds=0.5)
    return handled


async def test_crash_between_insert_and_commit(
    make_harness: Any, sqlite_url: str, kafka_bootstrap: str
) -> None:
    h: Harness = await make_harness(sqlite_url)
    sub = await subscribe(h)
    topic, group = f"schedule-events-{uuid.uuid4().hex[:8]}", f"notification-{uuid.uuid4().hex[:8]}"
    await create_topics(kafka_bootstrap, [topic])
    publisher = KafkaPublisher(kafka_bootstrap, idempotent=False)
    await publisher.start()
    events = [schedule_event("t1", "schedule.run.failed") for _ in range(3)]
    await publisher.publish([Message(topic, "sch_1", raw) for _, raw in events])

    first = EventFanOutWorker(
        CrashOnCommit(consumer(kafka_bootstrap, topic, group)),
        h.app.container.fanout,
        batch_size=100,
    )
    await first.consumer.start()
    with pytest.raises(Crash):
        await run_until_records(first, 3)
    await first.consumer.stop()  # died: offsets never committed
    assert len(await deliveries(h, sub["id"])) == 3  # but the rows are durable

    second = EventFanOutWorker(
        consumer(kafka_bootstrap, topic, group), h.app.container.fanout, batch_size=100
    )
    await second.consumer.start()
    try:
        assert await run_until_records(second, 3) == 3  # re-read: nothing was lost
        rows = await deliveries(h, sub["id"])
        assert len(rows) == 3  # the unique key absorbed the re-read
        assert {r["event_id"] for r in rows} == {event_id for event_id, _ in events}
        _late_id, late = schedule_event("t1", "schedule.paused")
        await publisher.publish([Message(topic, "sch_1", late)])
        assert await run_until_records(second, 1) == 1  # committed: only the new record
        assert len(await deliveries(h, sub["id"])) == 4
    finally:
        await second.consumer.stop()
        await publisher.stop()
