"""A downgrade's pause is a version by `system` with source `quota` (DESIGN.md §7b), written by
the tenant consumer's real apply path, in the batch's transaction."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import InProcessBus
from scheduler.adapters.db.tables import schedule_versions
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.events.tenant_consumer import TOPICS, TenantConsumerWorker
from scheduler.domain.tenant import Entitlements
from tests.scheduler.tenant.conftest import T0, ManualClock, add_schedule, entitlements_event


async def test_a_downgrade_pause_is_a_quota_version(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock, engine: AsyncEngine
) -> None:
    kept = await add_schedule(uows, mclock, tenant="t1", name="first")
    over = await add_schedule(uows, mclock, tenant="t1", name="second")
    worker = TenantConsumerWorker(
        InProcessBus().consumer(TOPICS, "scheduler-tenant-state"),
        uows,
        mclock,
        defaults=Entitlements(),
    )
    await worker.apply([entitlements_event("t1", T0, {"max_schedules": 1})])
    async with engine.connect() as conn:
        rows = list(
            await conn.execute(
                sa.select(schedule_versions).order_by(
                    schedule_versions.c.schedule_id, schedule_versions.c.version
                )
            )
        )
    by_schedule = {(r.schedule_id, r.version): r for r in rows}
    assert set(by_schedule) == {(kept.id, 1), (over.id, 1), (over.id, 2)}
    paused = by_schedule[(over.id, 2)]
    assert (paused.actor, paused.source, paused.state, paused.paused_reason) == (
        "system",
        "quota",
        "paused",
        "quota",
    )
    assert {c["field"] for c in paused.changes} == {"state", "paused_reason"}
