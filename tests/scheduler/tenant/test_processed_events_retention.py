"""`processed_events` has one pruner, the retention worker, at
SCHEDULER_PROCESSED_EVENTS_RETENTION_DAYS: the tenant consumer applying batches never prunes it,
so a retention longer than 30 days holds."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import sqlalchemy as sa
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import InProcessBus, Message, encode
from scheduler.adapters.db.tenant_store import processed_events
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.events.tenant_consumer import TOPICS, TenantConsumerWorker
from scheduler.bootstrap import retention_policy, retention_worker
from scheduler.config import SchedulerSettings
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer.tenant_events import BatchReport
from tests.scheduler.conftest import SECRET_KEY
from tests.scheduler.tenant.conftest import T0, ManualClock, platform_event

WAIT_SECONDS = 30.0
DAY = timedelta(days=1)


async def processed_ids(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set((await conn.execute(sa.select(processed_events.c.event_id))).scalars())


async def test_processed_events_kept_for_the_configured_days_and_pruned_by_retention_only(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock, engine: AsyncEngine
) -> None:
    settings = SchedulerSettings(
        secret_key=SecretStr(SECRET_KEY), processed_events_retention_days=45
    )
    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(processed_events),
            [
                {"event_id": "evt_35_days", "processed_at": T0 - 35 * DAY},
                {"event_id": "evt_50_days", "processed_at": T0 - 50 * DAY},
            ],
        )

    # The tenant consumer applies a batch (and would prune here if it pruned at all).
    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    event = platform_event("suspended", "t1", T0 - DAY)
    await publisher.publish([Message(topic=TOPICS[0], key="t1", value=encode(event))])
    applied = asyncio.Event()

    def on_batch(report: BatchReport) -> None:
        applied.set()

    consumer = TenantConsumerWorker(
        bus.consumer(TOPICS, "scheduler-tenant-state"),
        uows,
        mclock,
        defaults=Entitlements(),
        on_batch=on_batch,
        poll_seconds=0.05,
    )
    task = asyncio.create_task(consumer.run())
    try:
        await asyncio.wait_for(applied.wait(), WAIT_SECONDS)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, WAIT_SECONDS)
        await publisher.stop()
    assert await processed_ids(engine) == {"evt_35_days", "evt_50_days", event["id"]}

    # One retention pass at the configured 45 days.
    retention = retention_worker(uows, retention_policy(settings), mclock)
    await retention.run_once()
    assert await processed_ids(engine) == {"evt_35_days", event["id"]}
