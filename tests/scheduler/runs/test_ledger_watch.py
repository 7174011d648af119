"""The worker's periodic check of the ledger (service_layer/ledger_watch.py) on SQLite and
PostgreSQL: a missing occurrence is counted once, across passes and concurrent replicas; paused,
planned and not-yet-planned occurrences are not counted; a deleted schedule's watermark goes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from unittest.mock import patch

import sqlalchemy as sa

from scheduler.adapters.db.tables import ledger_watermarks, runs
from scheduler.bootstrap import Container
from scheduler.domain.policies import Action
from scheduler.service_layer import ledger_watch
from scheduler.service_layer import schedules as schedule_svc
from scheduler.service_layer.ledger_watch import SeedWalk, count_missing_once
from scheduler.service_layer.planning_service import plan_due
from servicekit.data.ids import first_id_at
from tests.scheduler.runs.conftest import ManualClock, add_schedule

AT_0903 = datetime(2026, 3, 2, 9, 3, tzinfo=UTC)


async def plan_minutes(container: Container, clock: ManualClock, count: int) -> None:
    for _ in range(count):
        await plan_due(container.uow_factory, now=clock())
        clock.advance(minutes=1)


async def delete_run(container: Container, schedule_id: str, at: datetime) -> None:
    async with container.engine.begin() as conn:
        deleted = await conn.execute(
            sa.delete(runs).where(runs.c.schedule_id == schedule_id, runs.c.scheduled_for == at)
        )
        assert deleted.rowcount == 1


async def marks(container: Container) -> dict[str, datetime]:
    async with container.engine.connect() as conn:
        rows = await conn.execute(sa.select(ledger_watermarks))
        return {r.schedule_id: r.checked_until for r in rows}


async def test_a_missing_occurrence_is_counted_once(
    container: Container, mclock: ManualClock
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")  # 09:00:30
    paused = await add_schedule(container, "http://127.0.0.1:9/x", name="paused")
    await schedule_svc.pause_schedule(
        container.uow_factory(),
        tenant_id="tenant-a",
        schedule_id=paused.id,
        reason=None,
        expected_version=None,
        clock=mclock,
    )
    await plan_minutes(container, mclock, 6)  # 09:01 .. 09:06 planned; now 09:06:30
    await delete_run(container, s.id, AT_0903)

    first = await count_missing_once(container.uow_factory, mclock())
    assert (first.checked, first.missing) == (1, 1)  # a paused schedule gets no watermark
    assert paused.id not in await marks(container)
    # The range is counted up to now - 60 s; the next passes count only what came since.
    assert (await marks(container))[s.id] == mclock() - timedelta(seconds=60)
    again = await count_missing_once(container.uow_factory, mclock())
    assert again.missing == 0
    await plan_minutes(container, mclock, 3)
    later = await count_missing_once(container.uow_factory, mclock())
    assert later.missing == 0


async def test_occurrences_the_planner_has_not_reached_are_not_missing_yet(
    container: Container, mclock: ManualClock
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    await plan_minutes(container, mclock, 2)  # 09:01, 09:02 planned
    mclock.advance(minutes=5)  # the planner stops: 09:03 .. 09:07 not planned, now 09:07:30
    report = await count_missing_once(container.uow_factory, mclock())
    assert report.missing == 0
    # The watermark waits just before the first occurrence the planner has still to plan.
    assert (await marks(container))[s.id] == AT_0903 - timedelta(microseconds=1)
    await plan_due(container.uow_factory, now=mclock())  # catches up (misfire skips)
    assert (await count_missing_once(container.uow_factory, mclock())).missing == 0


async def test_replicas_count_each_missing_occurrence_once(
    container: Container, mclock: ManualClock
) -> None:
    ids = [
        (await add_schedule(container, None, name=f"s{i}", action=Action.EVENT)).id
        for i in range(6)
    ]
    await plan_minutes(container, mclock, 5)
    for sid in ids:
        await delete_run(container, sid, AT_0903)
    now = mclock()
    # Three replicas at once, batches of two, then passes until no batch is full.
    reports = list(
        await asyncio.gather(
            *(count_missing_once(container.uow_factory, now, batch=2) for _ in range(3))
        )
    )
    for _ in range(10):
        reports.append(await count_missing_once(container.uow_factory, now, batch=2))
        if not reports[-1].more:
            break
    assert sum(r.missing for r in reports) == 6
    assert (await count_missing_once(container.uow_factory, now)).missing == 0


async def test_a_deleted_schedules_watermark_goes(
    container: Container, mclock: ManualClock
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    await plan_minutes(container, mclock, 3)
    await count_missing_once(container.uow_factory, mclock())
    assert s.id in await marks(container)
    await schedule_svc.delete_schedule(
        container.uow_factory(),
        tenant_id="tenant-a",
        schedule_id=s.id,
        expected_version=None,
        clock=mclock,
    )
    mclock.advance(minutes=2)
    assert (await count_missing_once(container.uow_factory, mclock())).missing == 0
    assert s.id not in await marks(container)


async def test_the_seed_walks_by_id_then_reads_only_recent_ids(
    container: Container, mclock: ManualClock
) -> None:
    """The walk that gives schedules a watermark reads SEED_WINDOW ids a pass, from the start
    once an hour; between full walks only the ids made in the last RECENT. A pass never reads
    every schedule (it did, in a herd's many passes)."""
    old = await add_schedule(container, "http://127.0.0.1:9/x")
    async with container.engine.begin() as conn:
        await conn.execute(sa.delete(ledger_watermarks))
    walk = SeedWalk()
    with patch.object(ledger_watch, "SEED_WINDOW", 1):
        first = await count_missing_once(container.uow_factory, mclock(), walk=walk)
        assert first.more  # a full window of a full walk: the next pass comes at once
        assert walk.after == old.id
        assert old.id in await marks(container)
        await count_missing_once(container.uow_factory, mclock(), walk=walk)
    # The end was reached: the next passes start at the ids of the last RECENT.
    assert walk.after == first_id_at("sch", mclock() - ledger_watch.RECENT)
    mclock.advance(minutes=15)
    await count_missing_once(container.uow_factory, mclock(), walk=walk)
    assert walk.after > old.id  # made 15 minutes ago: the next passes do not read it
    async with container.engine.begin() as conn:
        await conn.execute(sa.delete(ledger_watermarks))
    mclock.advance(minutes=5)
    await count_missing_once(container.uow_factory, mclock(), walk=walk)
    assert old.id not in await marks(container)
    mclock.advance(minutes=60)  # a full walk again
    await count_missing_once(container.uow_factory, mclock(), walk=walk)
    assert old.id in await marks(container)
    # A sweep of the recent ids ended: the passes of the next SEED_REST seed nothing (a herd's
    # passes come at once while watermark batches are full, and re-read the same ids).
    new_1 = await add_schedule(container, "http://127.0.0.1:9/x", name="new-1")
    new_2 = await add_schedule(container, "http://127.0.0.1:9/x", name="new-2")
    async with container.engine.begin() as conn:
        await conn.execute(sa.delete(ledger_watermarks))
    assert not walk.full
    await count_missing_once(container.uow_factory, mclock(), walk=walk)
    assert {new_1.id, new_2.id}.isdisjoint(await marks(container))
    # Then a full window of recent ids goes on at the next interval, not at once.
    mclock.advance(seconds=ledger_watch.SEED_REST.total_seconds())
    with patch.object(ledger_watch, "SEED_WINDOW", 1):
        report = await count_missing_once(container.uow_factory, mclock(), walk=walk)
        assert not report.more
        assert len(await marks(container)) == 1  # one window, the rest at the next interval
        for _ in range(3):
            mclock.advance(seconds=ledger_watch.INTERVAL_SECONDS)
            await count_missing_once(container.uow_factory, mclock(), walk=walk)
    assert {new_1.id, new_2.id} <= set(await marks(container))


async def test_a_sweep_ends_and_a_schedule_is_checked_again_an_interval_later(
    container: Container, mclock: ManualClock
) -> None:
    """More schedules than a batch: the passes follow each other until every watermark is at
    the horizon, then stop; a moment later nothing is stale (the horizon moved on by a second,
    not by an interval), and an interval later every schedule is checked again. Without the
    margin the watch re-claimed the same watermarks forever (194,600 updates in a bench)."""
    for i in range(5):
        await add_schedule(container, "http://127.0.0.1:9/x", name=f"s{i}")
    await plan_minutes(container, mclock, 3)
    reports = []
    for _ in range(10):
        reports.append(await count_missing_once(container.uow_factory, mclock(), batch=2))
        if not reports[-1].more:
            break
    assert [r.checked for r in reports] == [2, 2, 1]
    mclock.advance(seconds=1)
    again = await count_missing_once(container.uow_factory, mclock(), batch=2)
    assert (again.checked, again.more) == (0, False)
    mclock.advance(seconds=ledger_watch.INTERVAL_SECONDS)
    later = await count_missing_once(container.uow_factory, mclock(), batch=10)
    assert later.checked == 5
