"""The consumer worker over the real buses: the in-process bus (out-of-order, duplicate and
malformed records) and a real Kafka-protocol broker (tansu) end to end: platform-events ->
suspended -> a planned occurrence recorded skipped `tenant_suspended`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import Consumer, InProcessBus, KafkaConsumer, KafkaPublisher, Message, encode
from scheduler.adapters.db.tables import runs
from scheduler.adapters.db.tenant_store import TenantProjectionCache
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.events.tenant_consumer import TOPICS, TenantConsumerWorker
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer.planning_service import plan_due
from scheduler.service_layer.tenant_events import BatchReport
from tests.scheduler.tenant.conftest import (
    T0,
    ManualClock,
    add_schedule,
    entitlements_event,
    platform_event,
)
from tests.support.kafka import FAST_GROUP_JOIN, create_topics, kafka_bootstrap  # noqa: F401

WAIT_SECONDS = 30.0  # bound on waiting for the worker to apply what was published


def messages(events: Sequence[tuple[str, dict[str, Any]]]) -> list[Message]:
    return [Message(topic=t, key=e["tenant_id"], value=encode(e)) for t, e in events]


async def run_until(
    worker: TenantConsumerWorker, reports: list[BatchReport], events_expected: int
) -> None:
    """Run the worker until it has seen `events_expected` events, then stop it."""
    done = asyncio.Event()

    def on_batch(report: BatchReport) -> None:
        reports.append(report)
        seen = sum(r.applied + r.unchanged + r.duplicates + r.invalid for r in reports)
        if seen >= events_expected:
            done.set()

    worker.on_batch = on_batch
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(done.wait(), WAIT_SECONDS)
    finally:
        worker.stop()
        await asyncio.wait_for(task, WAIT_SECONDS)


async def test_in_process_bus_out_of_order_duplicates_and_garbage(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock, engine: AsyncEngine
) -> None:
    bus = InProcessBus()
    consumer: Consumer = bus.consumer(TOPICS, "scheduler-tenant-state")
    publisher = bus.publisher()
    await publisher.start()
    newer = platform_event("reinstated", "t1", T0 + timedelta(hours=1))
    older = platform_event("suspended", "t1", T0)
    limits = entitlements_event("t1", T0, {"max_schedules": 2})
    batch = messages(
        [("platform-events", newer), ("platform-events", older), ("billing-entitlements", limits)]
    )
    garbage = Message(topic="platform-events", key=None, value=b"not json")
    await publisher.publish([*batch, garbage, *batch])  # the batch twice: duplicates
    cache = TenantProjectionCache(engine, Entitlements())
    worker = TenantConsumerWorker(
        consumer, uows, mclock, defaults=Entitlements(), cache=cache, poll_seconds=0.05
    )
    reports: list[BatchReport] = []
    await run_until(worker, reports, events_expected=6)
    assert sum(r.applied for r in reports) == 2  # reinstatement and entitlements
    assert sum(r.duplicates for r in reports) == 3
    assert not cache.suspended_at("t1", T0 + timedelta(hours=2))
    # The older suspension arrived after the newer reinstatement: it is dropped whole (an older
    # event never overrides a newer one), so its interval is not known either.
    assert not cache.suspended_at("t1", T0 + timedelta(minutes=1))
    assert cache.entitlements("t1").max_schedules == 2
    # Offsets were committed: a new member of the group gets nothing again.
    again = bus.consumer(TOPICS, "scheduler-tenant-state")
    await again.start()
    assert await again.poll(timeout_seconds=0.05) == []
    await again.stop()


async def test_kafka_suspension_skips_planned_occurrence(
    kafka_bootstrap: str,  # noqa: F811
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    engine: AsyncEngine,
) -> None:
    schedule = await add_schedule(uows, mclock, tenant="t-kafka", cron="* * * * *")
    due = schedule.next_run_at
    assert due is not None
    suffix = uuid.uuid4().hex[:8]
    topics = (f"platform-events-{suffix}", f"billing-entitlements-{suffix}")
    await create_topics(kafka_bootstrap, topics)
    publisher = KafkaPublisher(kafka_bootstrap, idempotent=False)
    await publisher.start()
    try:
        await publisher.publish(
            messages([(topics[0], platform_event("suspended", "t-kafka", due - timedelta(1)))])
        )
    finally:
        await publisher.stop()
    consumer = KafkaConsumer(kafka_bootstrap, topics, f"tenant-{suffix}", **FAST_GROUP_JOIN)
    cache = TenantProjectionCache(engine)
    worker = TenantConsumerWorker(
        consumer, uows, mclock, defaults=Entitlements(), cache=cache, poll_seconds=0.2
    )
    await run_until(worker, [], events_expected=1)
    assert cache.suspended_at("t-kafka", due)
    # The planner, past the occurrence, with the projection as its TenantStatus.
    mclock.now = due + timedelta(seconds=30)
    store = SqlUnitOfWorkFactory(engine, uows.box)
    report = await plan_due(store, now=mclock(), tenants=cache)
    assert report.runs_inserted >= 1
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(runs.c.status, runs.c.skip_reason).where(
                    runs.c.schedule_id == schedule.id, runs.c.scheduled_for == due
                )
            )
        ).one()
    assert tuple(row) == ("skipped", "tenant_suspended")
