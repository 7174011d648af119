"""The projections on SQLite and PostgreSQL: order-safety, dedup by event id, defaults, the
cache the planner and dispatcher read, and the runs-per-day count."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.adapters.db.runs.rows import run_to_row
from scheduler.adapters.db.tables import runs
from scheduler.adapters.db.tenant_store import TenantProjectionCache, processed_events
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.domain.run import Run, SkipReason, Trigger
from scheduler.domain.tenant import Entitlements, quota_day
from scheduler.service_layer import errors, quota, tenant_events
from tests.scheduler.tenant.conftest import (
    T0,
    ManualClock,
    entitlements_event,
    platform_event,
)


async def test_out_of_order_and_duplicate_platform_events(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    suspended = platform_event("suspended", "t1", T0)
    reinstated = platform_event("reinstated", "t1", T0 + timedelta(hours=1))
    # The reinstatement arrives first; the older suspension must not override it.
    r1 = await tenant_events.apply_events(uows(), [reinstated, suspended], mclock())
    assert (r1.applied, r1.unchanged) == (1, 1)
    r2 = await tenant_events.apply_events(uows(), [suspended, reinstated], mclock())
    assert r2.duplicates == 2
    assert r2.applied == 0
    async with uows() as uow:
        state = await uow.tenants.status("t1")
        assert state is not None
        assert not state.suspended
        assert state.event_id == reinstated["id"]
        assert not await quota.is_suspended_at(uow, "t1", T0 + timedelta(hours=2))
        assert not await quota.is_suspended_at(uow, "t2", T0)  # no event: never suspended
    # A later suspension takes effect from its own time.
    later = platform_event("suspended", "t1", T0 + timedelta(hours=3))
    await tenant_events.apply_events(uows(), [later], mclock())
    async with uows() as uow:
        assert await quota.is_suspended_at(uow, "t1", T0 + timedelta(hours=3))
        assert not await quota.is_suspended_at(uow, "t1", T0 + timedelta(hours=2))
        await quota.ensure_writable(uow, "t2", mclock())
        with pytest.raises(errors.TenantSuspended) as info:
            await quota.ensure_writable(uow, "t1", T0 + timedelta(hours=4))
        assert info.value.tenant_id == "t1"


async def test_entitlements_partial_limits_stale_and_invalid(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock, engine: AsyncEngine
) -> None:
    defaults = Entitlements(max_runs_per_day=500)
    newer = entitlements_event("t1", T0 + timedelta(minutes=5), {"max_schedules": 3})
    older = entitlements_event("t1", T0, {"max_schedules": 50, "max_runs_per_day": 9})
    bad = entitlements_event("t1", T0 + timedelta(hours=1), {"max_schedules": -5})
    other = {**platform_event("suspended", "t9", T0), "type": "tenant.renamed"}
    report = await tenant_events.apply_events(
        uows(), [newer, older, bad, other], mclock(), defaults
    )
    assert (report.applied, report.unchanged, report.invalid) == (1, 2, 1)
    async with uows() as uow:
        ent = await quota.entitlements_for(uow, "t1", defaults)
        # Only the newer event counts; what it omits keeps the configured default.
        assert ent == Entitlements(max_schedules=3, max_runs_per_day=500)
        assert await quota.entitlements_for(uow, "nobody", defaults) == defaults
    async with engine.connect() as conn:
        ids = set((await conn.execute(sa.select(processed_events.c.event_id))).scalars())
    # Even the invalid and foreign events are recorded, so a redelivery skips them cheaply.
    assert ids == {newer["id"], older["id"], bad["id"], other["id"]}


async def test_cache_answers_synchronously_after_refresh(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock, engine: AsyncEngine
) -> None:
    cache = TenantProjectionCache(engine, Entitlements(max_schedules=7))
    await cache.refresh()
    assert not cache.suspended_at("t1", T0)
    assert cache.entitlements("t1").max_schedules == 7
    await tenant_events.apply_events(
        uows(),
        [
            platform_event("suspended", "t1", T0),
            entitlements_event("t1", T0, {"max_payload_bytes": 10}),
        ],
        mclock(),
    )
    assert await cache.refresh() == 2
    assert cache.suspended_at("t1", T0 + timedelta(seconds=1))
    assert not cache.suspended_at("t1", T0 - timedelta(seconds=1))
    assert cache.entitlements("t1").max_payload_bytes == 10
    assert cache.entitlements("t1").max_schedules == 7
    mclock.advance(minutes=5)
    await tenant_events.apply_events(
        uows(), [platform_event("reinstated", "t1", T0 + timedelta(1))], mclock()
    )
    await cache.refresh()  # incremental: only recent rows, the change is seen
    assert not cache.suspended_at("t1", T0 + timedelta(days=2))


async def test_runs_per_day_count_is_non_skipped_runs_created_in_the_utc_day(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock, engine: AsyncEngine
) -> None:
    await tenant_events.apply_events(
        uows(), [entitlements_event("t1", T0, {"max_runs_per_day": 3})], T0
    )
    rows = [
        Run.planned(
            tenant_id="t1", schedule_id="sch_a", scheduled_for=T0, now=T0, trigger=Trigger.SCHEDULE
        ),
        Run.planned(
            tenant_id="t1",
            schedule_id="sch_a",
            scheduled_for=T0 + timedelta(minutes=1),
            now=T0,
            trigger=Trigger.SCHEDULE,
        ),
        Run.skipped(  # skipped runs never use the budget
            tenant_id="t1",
            schedule_id="sch_a",
            scheduled_for=T0 + timedelta(minutes=2),
            now=T0,
            reason=SkipReason.MISFIRE,
        ),
        Run.planned(  # created the next UTC day (for an occurrence of today: a late one)
            tenant_id="t1",
            schedule_id="sch_a",
            scheduled_for=T0 + timedelta(minutes=3),
            now=T0 + timedelta(days=1),
            trigger=Trigger.SCHEDULE,
        ),
        Run.planned(  # created today for a past day's occurrence (a backfill): counts today
            tenant_id="t1",
            schedule_id="sch_a",
            scheduled_for=T0 - timedelta(days=400),
            now=T0,
            trigger=Trigger.BACKFILL,
        ),
        Run.planned(  # another tenant
            tenant_id="t2", schedule_id="sch_b", scheduled_for=T0, now=T0, trigger=Trigger.SCHEDULE
        ),
    ]
    async with engine.begin() as conn:
        await conn.execute(sa.insert(runs), [run_to_row(r) for r in rows])
    async with uows() as uow:
        today = await uow.runs.count_runs_by_tenant(["t1", "t2", "t3"], *quota_day(T0))
        tomorrow = await uow.runs.count_runs_by_tenant(["t1"], *quota_day(T0 + timedelta(1)))
    assert today == {"t1": 3, "t2": 1}
    assert tomorrow == {"t1": 1}
    assert json.dumps(rows[0].status) == '"pending"'
