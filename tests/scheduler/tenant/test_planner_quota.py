"""max_runs_per_day at planning: the planner charges each tenant's pending runs to the UTC
day it creates them in (its pass's `now`), skips the rest with `quota`; an occurrence the
look-ahead reaches past midnight counts the day it was planned, and the next day starts afresh."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.adapters.db.tables import runs, schedules
from scheduler.adapters.db.tenant_store import TenantProjectionCache
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.service_layer import tenant_events
from scheduler.service_layer.planning_service import PlanningSettings, plan_due
from tests.scheduler.tenant.conftest import ManualClock, add_schedule, entitlements_event

BEFORE_MIDNIGHT = datetime(2026, 3, 2, 23, 59, 30, tzinfo=UTC)


async def _runs(engine: AsyncEngine, schedule_id: str) -> list[tuple[str, str | None, datetime]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.select(runs.c.status, runs.c.skip_reason, runs.c.scheduled_for)
            .where(runs.c.schedule_id == schedule_id)
            .order_by(runs.c.scheduled_for)
        )
        return [(r[0], r[1], r[2]) for r in rows]


async def _due_at(engine: AsyncEngine, when: datetime) -> None:
    async with engine.begin() as conn:
        await conn.execute(sa.update(schedules).values(next_run_at=when))


async def test_budget_is_per_tenant_and_per_utc_day(
    uows: SqlUnitOfWorkFactory, engine: AsyncEngine
) -> None:
    clock = ManualClock(BEFORE_MIDNIGHT - timedelta(hours=1))
    # t1 may have one run a day; t2 has the default (10,000).
    await tenant_events.apply_events(
        uows(), [entitlements_event("t1", clock(), {"max_runs_per_day": 1})], clock()
    )
    first = await add_schedule(uows, clock, tenant="t1", name="a", cron="* * * * *")
    second = await add_schedule(uows, clock, tenant="t1", name="b", cron="* * * * *")
    other = await add_schedule(uows, clock, tenant="t2", name="c", cron="* * * * *")
    await _due_at(engine, BEFORE_MIDNIGHT - timedelta(seconds=30))  # 23:59:00, not missed
    cache = TenantProjectionCache(engine)
    await cache.refresh()

    report = await plan_due(
        SqlUnitOfWorkFactory(engine, uows.box),
        now=BEFORE_MIDNIGHT,
        settings=PlanningSettings(lookahead=timedelta(seconds=60)),
        tenants=cache,
    )

    assert report.runs_inserted == 6  # 23:59 and 00:00 of each schedule
    t_0359 = BEFORE_MIDNIGHT - timedelta(seconds=30)
    midnight = BEFORE_MIDNIGHT + timedelta(seconds=30)
    # The older schedule takes t1's one run of the day; 00:00, planned today, is over it too.
    a, b = await _runs(engine, first.id), await _runs(engine, second.id)
    assert [(s, r) for s, r, _ in a] == [("pending", None), ("skipped", "quota")]
    assert [t for _, _, t in a] == [t_0359, midnight]
    assert [(s, r) for s, r, _ in b] == [("skipped", "quota"), ("skipped", "quota")]
    assert [s for s, _, _ in await _runs(engine, other.id)] == ["pending", "pending"]

    # The next pass runs in the new day, which has created nothing yet: t1's 00:01 fits, and
    # the one after it (next pass, same day) does not.
    for now in (midnight + timedelta(seconds=30), midnight + timedelta(seconds=90)):
        await plan_due(
            SqlUnitOfWorkFactory(engine, uows.box),
            now=now,
            settings=PlanningSettings(lookahead=timedelta(seconds=30)),
            tenants=cache,
        )
    assert [(s, r) for s, r, _ in (await _runs(engine, first.id))[2:]] == [
        ("pending", None),
        ("skipped", "quota"),
    ]


async def test_without_a_projection_nothing_is_counted(
    uows: SqlUnitOfWorkFactory, engine: AsyncEngine
) -> None:
    clock = ManualClock(BEFORE_MIDNIGHT - timedelta(hours=1))
    await tenant_events.apply_events(
        uows(), [entitlements_event("t1", clock(), {"max_runs_per_day": 0})], clock()
    )
    s = await add_schedule(uows, clock, tenant="t1", cron="* * * * *")
    await _due_at(engine, BEFORE_MIDNIGHT - timedelta(seconds=30))
    # No `tenants`: nothing is counted (callers that wire no projection plan everything).
    await plan_due(
        SqlUnitOfWorkFactory(engine, uows.box),
        now=BEFORE_MIDNIGHT,
        settings=PlanningSettings(lookahead=timedelta(seconds=10)),
    )
    assert [st for st, _, _ in await _runs(engine, s.id)] == ["pending"]
