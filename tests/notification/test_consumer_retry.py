"""A fan-out batch whose handler fails (the database unreachable for one step) is retried whole
before anything new is polled: every record is handled, none skipped, and the group's offsets
never move past a record not handled. On the in-process bus through the running service's
worker loops, and on a real Kafka-protocol broker (tansu)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from eventbus import KafkaPublisher, Message
from notification.entrypoints.workers import EventFanOutWorker
from notification.service_layer.fanout import FanOut, IncomingEvent
from servicekit.runtime.worker import WorkerLoop
from tests.notification.api import deliveries, subscribe
from tests.notification.conftest import Harness
from tests.notification.events import publish, schedule_event
from tests.support.kafka import create_topics, fast_consumer, poll_exactly, unique

WAIT_SECONDS = 20.0
EVENTS = 5
BATCH = 2


class FailsFirstBatch(FanOut):
    """The service's fan-out whose first call fails as if the database were unreachable; every
    call records the event ids it was handed."""

    def __init__(self, inner: FanOut) -> None:
        super().__init__(inner.store, inner.clock)
        self.calls: list[list[str]] = []

    async def handle(self, events: Sequence[IncomingEvent]) -> int:
        self.calls.append([e.id for e in events])
        if len(self.calls) == 1:
            raise ConnectionRefusedError("database unreachable")
        return await super().handle(events)


async def wait_for_deliveries(h: Harness, sub_id: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WAIT_SECONDS
    rows = await deliveries(h, sub_id)
    while len(rows) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        rows = await deliveries(h, sub_id)
    return rows


def expected_calls(ids: list[str]) -> list[list[str]]:
    """The failed first batch handed over again, then the rest in log order."""
    batches = [ids[i : i + BATCH] for i in range(0, len(ids), BATCH)]
    return [batches[0], *batches]


async def test_a_failed_batch_is_retried_not_skipped(make_harness: Any, db_url: str) -> None:
    h: Harness = await make_harness(db_url, run_workers=True, consumer_batch_size=BATCH)
    sub = await subscribe(h)
    flaky = FailsFirstBatch(h.app.events.fanout)
    h.app.events.fanout = flaky
    events = [schedule_event("t1", "schedule.run.failed") for _ in range(EVENTS)]
    await publish(h.bus, "schedule-events", *(raw for _, raw in events))

    rows = await wait_for_deliveries(h, sub["id"], EVENTS)
    ids = [event_id for event_id, _ in events]
    assert sorted(r["event_id"] for r in rows) == sorted(ids)  # none skipped
    # Nothing was polled past the failed batch until it was handled.
    assert flaky.calls == expected_calls(ids)


@pytest.mark.kafka
async def test_a_failed_batch_is_retried_on_kafka(
    make_harness: Any, sqlite_url: str, kafka_bootstrap: str
) -> None:
    h: Harness = await make_harness(sqlite_url)
    sub = await subscribe(h)
    topic, group = unique("schedule-events"), unique("notification")
    await create_topics(kafka_bootstrap, [topic])  # one partition: one order
    publisher = KafkaPublisher(kafka_bootstrap, idempotent=False)
    await publisher.start()
    events = [schedule_event("t1", "schedule.run.failed") for _ in range(EVENTS)]
    await publisher.publish([Message(topic, "sch_1", raw) for _, raw in events])

    flaky = FailsFirstBatch(h.app.container.fanout)
    worker = EventFanOutWorker(
        fast_consumer(kafka_bootstrap, [topic], group), flaky, batch_size=BATCH, poll_seconds=0.2
    )
    # As runtime.py runs it.
    loop = WorkerLoop("fanout", worker.step, idle_seconds=0.2, backoff_initial_seconds=0.1)
    await worker.consumer.start()
    task = asyncio.create_task(loop.run())
    try:
        rows = await wait_for_deliveries(h, sub["id"], EVENTS)
    finally:
        loop.stop()
        await asyncio.wait_for(task, WAIT_SECONDS)
        await worker.consumer.stop()
    ids = [event_id for event_id, _ in events]
    assert sorted(r["event_id"] for r in rows) == sorted(ids)
    assert flaky.calls == expected_calls(ids)

    # The group's offsets stand right after the last handled record: a new member of the
    # group reads only what is published next.
    _, late = schedule_event("t1", "schedule.paused")
    await publisher.publish([Message(topic, "sch_1", late)])
    await publisher.stop()
    again = fast_consumer(kafka_bootstrap, [topic], group)
    await again.start()
    try:
        assert [r.value for r in await poll_exactly(again, 1)] == [late]
        assert await again.poll(timeout_seconds=0.5) == []
    finally:
        await again.stop()
