"""max_runs_per_day under concurrency on PostgreSQL (READ COMMITTED, several connections): the
count reserves a tenant's quota day until commit, so concurrent backfills, and a backfill beside
a planner pass, cannot both spend the runs left; another tenant's day, or another day, does not
wait; and the lock order (schedule rows, then days ascending) leaves nothing to deadlock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.runs.planning import QUOTA_DAY_LOCK_NAMESPACE
from scheduler.adapters.db.tables import runs
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.run import Run, Trigger
from scheduler.domain.tenant import Entitlements, quota_day
from scheduler.service_layer import tenant_events
from scheduler.service_layer.backfill import ONCE, backfill
from scheduler.service_layer.errors import QuotaExceeded
from scheduler.service_layer.planning_service import PlanningSettings, plan_due
from tests.scheduler.runs.conftest import T0, ManualClock, add_schedule, make_container
from tests.scheduler.tenant.conftest import entitlements_event

pytestmark = pytest.mark.postgres

HOURLY = "0 * * * *"
# (04:00:30, 09:00:30] on T0's day holds five hourly occurrences.
AFTER, UNTIL = T0 - timedelta(hours=5), T0
WAIT_SECONDS = 10.0  # any wait here ends well within this, or the test fails


@pytest.fixture
async def pg(pg_url: str) -> AsyncIterator[Container]:
    c = make_container(pg_url, ManualClock())
    yield c
    await c.aclose()


async def _limit(uows: SqlUnitOfWorkFactory, tenant: str, per_day: int) -> None:
    event = entitlements_event(tenant, T0, {"max_runs_per_day": per_day})
    await tenant_events.apply_events(uows(), [event], T0)


async def _runs_in_day(container: Container, tenant: str) -> int:
    start, end = quota_day(T0)
    async with container.engine.connect() as conn:
        n = await conn.scalar(
            sa.select(sa.func.count())
            .select_from(runs)
            .where(runs.c.tenant_id == tenant, runs.c.status != "skipped")
            .where(runs.c.scheduled_for >= start, runs.c.scheduled_for < end)
        )
    return int(n or 0)


async def _backfill(
    uows: SqlUnitOfWorkFactory, schedule_id: str, after: datetime = AFTER
) -> int | str:
    try:
        result = await backfill(
            uows,
            tenant_id="tenant-a",
            schedule_id=schedule_id,
            after=after,
            until=UNTIL,
            dry_run=False,
            include_existing=False,
            clock=lambda: T0,
        )
    except QuotaExceeded:
        return "refused"
    return result.created


async def test_concurrent_backfills_never_take_a_day_over_the_limit(pg: Container) -> None:
    uows = pg.uow_factory
    await _limit(uows, "tenant-a", 12)  # room for two backfills of five, not three
    schedules = [
        await add_schedule(pg, "http://127.0.0.1:9/x", cron=HOURLY, name=f"s{i}") for i in range(6)
    ]
    answers = await asyncio.wait_for(
        asyncio.gather(*(_backfill(uows, s.id) for s in schedules)), WAIT_SECONDS
    )
    assert sorted(answers, key=str) == [5, 5, "refused", "refused", "refused", "refused"]
    assert await _runs_in_day(pg, "tenant-a") == 10


async def test_a_count_waits_for_the_same_tenants_day_only(pg: Container) -> None:
    uows = pg.uow_factory
    start, end = quota_day(T0)
    s = await add_schedule(pg, "http://127.0.0.1:9/x", cron=HOURLY)
    async with uows() as first:
        assert await first.runs.count_runs_by_tenant(["tenant-a"], start, end) == {}

        async def count(tenant: str, day: datetime) -> dict[str, int]:
            async with uows() as uow:
                return await uow.runs.count_runs_by_tenant([tenant], *quota_day(day))

        # Another tenant's day and the same tenant's next day answer while `first` holds its.
        other = await asyncio.wait_for(count("tenant-b", T0), WAIT_SECONDS)
        tomorrow = await asyncio.wait_for(count("tenant-a", T0 + timedelta(days=1)), WAIT_SECONDS)
        assert (other, tomorrow) == ({}, {})
        same = asyncio.create_task(count("tenant-a", T0))
        done, _ = await asyncio.wait([same], timeout=0.5)
        assert not done, "the same tenant's day was counted while another transaction held it"
        run = Run.planned(
            tenant_id="tenant-a",
            schedule_id=s.id,
            scheduled_for=T0.replace(minute=0, second=0),
            now=T0,
            trigger=Trigger.BACKFILL,
        )
        assert await first.runs.insert_runs([run]) == 1
        await first.commit()
    # Counted once `first` committed, its run included.
    assert await asyncio.wait_for(same, WAIT_SECONDS) == {"tenant-a": 1}


class _PerDay:
    """The planner's tenant view: nobody suspended, `per_day` runs a day for everyone."""

    def __init__(self, per_day: int) -> None:
        self.limits = Entitlements(max_runs_per_day=per_day)

    def suspended_at(self, tenant_id: str, instant: datetime) -> bool:
        return False

    def entitlements(self, tenant_id: str) -> Entitlements:
        return self.limits


async def test_a_backfill_beside_planner_passes_shares_one_budget(pg: Container) -> None:
    uows = pg.uow_factory
    await _limit(uows, "tenant-a", 14)
    # Each every-minute schedule is planned (10 occurrences in a 10-minute look-ahead, within
    # T0's day) and backfilled (5 past minutes) at once. Pending runs past the budget are
    # planned skipped; a backfill past it is refused.
    schedules = [
        await add_schedule(pg, "http://127.0.0.1:9/x", name=f"m{i}", cron="* * * * *")
        for i in range(2)
    ]
    plan = PlanningSettings(lookahead=timedelta(minutes=10), batch=1)
    await asyncio.wait_for(
        asyncio.gather(
            *(_backfill(uows, s.id, after=T0 - timedelta(minutes=5)) for s in schedules),
            plan_due(uows, now=T0, settings=plan, tenants=_PerDay(14)),
            plan_due(uows, now=T0, settings=plan, tenants=_PerDay(14)),
        ),
        WAIT_SECONDS,
    )
    assert 5 <= await _runs_in_day(pg, "tenant-a") <= 14


async def _until_a_backend_waits_on_a_lock(container: Container) -> None:
    for _ in range(200):
        # A transaction each time: pg_stat_activity is read once per transaction.
        async with container.engine.connect() as conn:
            waiting = await conn.scalar(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()"
                )
            )
        if waiting:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("no transaction waited on a lock")


async def test_a_backfill_waits_for_the_planner_pass_that_counted_first(pg: Container) -> None:
    """The planner holds the schedule's row and the tenant's day; a backfill of that schedule
    waits for the day, then counts the runs the pass planned, and is refused."""
    uows = pg.uow_factory
    await _limit(uows, "tenant-a", 12)
    s = await add_schedule(pg, "http://127.0.0.1:9/x", name="m", cron="* * * * *")
    async with uows() as planner:
        (due,) = await planner.runs.lock_due_schedules(T0 + timedelta(minutes=10), 1)
        assert due.id == s.id
        assert await planner.runs.count_runs_by_tenant(["tenant-a"], *quota_day(T0)) == {}
        backfilling = asyncio.create_task(_backfill(uows, s.id, after=T0 - timedelta(minutes=5)))
        await asyncio.wait_for(_until_a_backend_waits_on_a_lock(pg), WAIT_SECONDS)
        planned = [
            Run.planned(
                tenant_id="tenant-a",
                schedule_id=s.id,
                scheduled_for=T0.replace(second=0) + timedelta(minutes=m),
                now=T0,
            )
            for m in range(1, 11)
        ]
        assert await planner.runs.insert_runs(planned) == 10
        await planner.commit()
    assert await asyncio.wait_for(backfilling, WAIT_SECONDS) == "refused"  # 10 + 5 > 12
    assert await _runs_in_day(pg, "tenant-a") == 10


MONTHLY = "0 0 1 * *"
DAILY = "0 0 * * *"
QUOTA_LOCKS = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = :ns"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


async def _quota_locks(container: Container) -> int:
    async with container.engine.connect() as conn:
        n = await conn.scalar(sa.text(QUOTA_LOCKS), {"ns": QUOTA_DAY_LOCK_NAMESPACE})
    return int(n or 0)


async def test_a_backfill_over_decades_holds_one_quota_lock(pg: Container) -> None:
    """The locks are counted from another connection while the backfill, its days counted,
    waits to insert a run another transaction is inserting too: one lock (today's), not one
    per day of its 40 years."""
    uows = pg.uow_factory
    s = await add_schedule(pg, "http://127.0.0.1:9/x", cron=MONTHLY)
    after = T0.replace(year=T0.year - 40)
    last = T0.replace(day=1, hour=0, minute=0, second=0)  # the range's last occurrence
    async with uows() as blocker:
        twin = Run.planned(
            tenant_id="tenant-a",
            schedule_id=s.id,
            scheduled_for=last,
            now=T0,
            trigger=Trigger.BACKFILL,
            due_at=T0,
        )
        twin.backfill_id = ONCE
        assert await blocker.runs.insert_runs([twin]) == 1
        backfilling = asyncio.create_task(_backfill(uows, s.id, after=after))
        await asyncio.wait_for(_until_a_backend_waits_on_a_lock(pg), WAIT_SECONDS)
        held = await _quota_locks(pg)
        await blocker.rollback()
    created = await asyncio.wait_for(backfilling, WAIT_SECONDS)
    assert created == 40 * 12  # 40 years of months
    assert held == 1


async def test_two_tenants_backfilling_decades_at_once_both_succeed(pg: Container) -> None:
    """~25 years of days each (9,000 occurrences, under the default 10,000 a day): both are
    accepted, while a sampler sees at most a lock per tenant (one per day of each range took
    18,000 locks, past PostgreSQL's lock table: both answered 503, and so did every other
    transaction that needed a lock meanwhile)."""
    uows = pg.uow_factory
    tenants = ("tenant-a", "tenant-b")
    schedules = {
        t: await add_schedule(pg, "http://127.0.0.1:9/x", cron=DAILY, tenant=t) for t in tenants
    }
    after = T0 - timedelta(days=9_000)
    seen: list[int] = []

    async def one(tenant: str) -> int | str:
        try:
            result = await backfill(
                uows,
                tenant_id=tenant,
                schedule_id=schedules[tenant].id,
                after=after,
                until=UNTIL,
                dry_run=False,
                include_existing=False,
                clock=lambda: T0,
            )
        except QuotaExceeded:
            return "refused"
        return result.created

    async def sample(stop: asyncio.Event) -> None:
        while not stop.is_set():
            seen.append(await _quota_locks(pg))
            await asyncio.sleep(0.01)

    stop = asyncio.Event()
    sampler = asyncio.create_task(sample(stop))
    try:
        answers = await asyncio.wait_for(
            asyncio.gather(*(one(t) for t in tenants)), 20 * WAIT_SECONDS
        )
    finally:
        stop.set()
        await asyncio.wait_for(sampler, WAIT_SECONDS)
    assert answers == [9_000, 9_000]
    assert seen
    assert max(seen) <= len(tenants)
