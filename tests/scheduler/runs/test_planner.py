"""The planning use case against real databases: one run per occurrence, next_run_at advanced
in the same transaction, misfire and overlap policies, replicas racing."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import sqlalchemy as sa

from scheduler.adapters.db.tables import runs, schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.policies import MisfirePolicy, OverlapPolicy
from scheduler.service_layer.planning_service import PlanningSettings, plan_due
from tests.scheduler.runs.conftest import ManualClock, add_schedule

LOOKAHEAD = PlanningSettings(lookahead=timedelta(seconds=10))


async def all_runs(container: Container) -> list[sa.Row]:
    async with container.engine.connect() as conn:
        q = sa.select(runs).order_by(runs.c.schedule_id, runs.c.scheduled_for)
        return list(await conn.execute(q))


async def test_plans_each_occurrence_once_and_advances(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/ok")
    assert s.next_run_at is not None
    # 5 s before the occurrence: inside the look-ahead, so it is planned ahead as pending.
    mclock.set(s.next_run_at - timedelta(seconds=5))
    report = await plan_due(uows, now=mclock(), settings=LOOKAHEAD)
    assert report.runs_inserted == 1
    assert report.earliest_pending == s.next_run_at
    again = await plan_due(uows, now=mclock(), settings=LOOKAHEAD)
    assert again.runs_inserted == 0  # next_run_at moved past it in the same transaction
    rows = await all_runs(container)
    assert [(r.status, r.scheduled_for, r.next_attempt_at) for r in rows] == [
        ("pending", s.next_run_at, s.next_run_at)
    ]
    assert rows[0].payload == {"job": "every-minute"}  # snapshot for replay


async def test_unique_key_makes_a_replanned_occurrence_a_no_op(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/ok")
    assert s.next_run_at is not None
    mclock.set(s.next_run_at)
    await plan_due(uows, now=mclock(), settings=LOOKAHEAD)
    # Someone (an API save with a stale copy, a restored backup) moves next_run_at back.
    async with container.engine.begin() as conn:
        await conn.execute(sa.update(schedules).values(next_run_at=s.next_run_at))
    report = await plan_due(uows, now=mclock(), settings=LOOKAHEAD)
    assert report.runs_inserted == 0
    assert len(await all_runs(container)) == 1


async def test_misfire_fire_once_runs_the_latest_and_skips_the_rest(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/ok", misfire=MisfirePolicy.FIRE_ONCE)
    assert s.next_run_at is not None
    mclock.set(s.next_run_at + timedelta(minutes=9, seconds=30))  # down for ~10 occurrences
    await plan_due(uows, now=mclock(), settings=LOOKAHEAD)
    rows = await all_runs(container)
    # T+8 min is the latest *missed* one (90 s late > 60 s grace) and fires late; T+9 min is
    # only 30 s late, within the grace, and fires normally; the 8 before are skipped.
    assert [r.status for r in rows] == ["skipped"] * 8 + ["pending"] * 2
    assert {r.skip_reason for r in rows[:8]} == {"misfire"}


async def test_misfire_fire_all_and_skip(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    a = await add_schedule(container, "http://127.0.0.1:9/ok", misfire=MisfirePolicy.FIRE_ALL)
    b = await add_schedule(container, "http://127.0.0.1:9/ok", misfire=MisfirePolicy.SKIP)
    assert a.next_run_at is not None
    mclock.set(a.next_run_at + timedelta(minutes=4, seconds=30))
    await plan_due(uows, now=mclock(), settings=LOOKAHEAD)
    rows = await all_runs(container)
    by = Counter((r.schedule_id, r.status) for r in rows)
    assert by[(a.id, "pending")] == 5
    # The last one is 30 s late, inside the misfire grace: it fires even under "skip".
    assert (by[(b.id, "skipped")], by[(b.id, "pending")]) == (4, 1)


async def test_overlap_skip_while_previous_run_unfinished(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/ok", overlap=OverlapPolicy.SKIP)
    assert s.next_run_at is not None
    mclock.set(s.next_run_at)
    await plan_due(uows, now=mclock(), settings=LOOKAHEAD)
    mclock.advance(minutes=1)  # the first run is still pending (nobody dispatched it)
    await plan_due(uows, now=mclock(), settings=LOOKAHEAD)
    rows = await all_runs(container)
    assert [(r.status, r.skip_reason) for r in rows] == [("pending", None), ("skipped", "overlap")]


async def test_paused_and_deleted_schedules_are_not_planned(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    from scheduler.service_layer import schedules as svc

    s = await add_schedule(container, "http://127.0.0.1:9/ok")
    await svc.pause_schedule(
        container.uow_factory(),
        tenant_id="tenant-a",
        schedule_id=s.id,
        reason=None,
        expected_version=None,
        clock=mclock,
    )
    mclock.advance(minutes=5)
    report = await plan_due(uows, now=mclock(), settings=LOOKAHEAD)
    assert report.schedules == 0
    assert await all_runs(container) == []


async def test_concurrent_planners_make_one_run_per_occurrence(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    for i in range(30):
        await add_schedule(
            container, "http://127.0.0.1:9/ok", name=f"s{i}", misfire=MisfirePolicy.FIRE_ALL
        )
    mclock.advance(minutes=5)
    small = PlanningSettings(lookahead=timedelta(seconds=10), batch=7)

    async def planner() -> None:
        while (await plan_due(uows, now=mclock(), settings=small)).schedules:
            pass

    await asyncio.gather(*(planner() for _ in range(4)))
    rows = await all_runs(container)
    keys = Counter((r.schedule_id, r.scheduled_for) for r in rows)
    assert len(keys) == 30 * 5
    assert set(keys.values()) == {1}
