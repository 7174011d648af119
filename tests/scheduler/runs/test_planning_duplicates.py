"""A pass over occurrences that already have a run (next_run_at moved back over them): the
duplicates are not inserted, so they neither count toward max_runs nor record events."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from scheduler.adapters.db.tables import outbox, runs, schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.policies import Action, MisfirePolicy
from scheduler.domain.schedule import Schedule
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer import schedules as schedule_svc
from scheduler.service_layer.planning_service import PlanningSettings, plan_due
from tests.scheduler.definitions import definition
from tests.scheduler.runs.conftest import T0, ManualClock

LOOKAHEAD = PlanningSettings(lookahead=timedelta(seconds=60))
NINE = T0.replace(second=0)  # 09:00, T0 is 09:00:30


def at(minute: int, second: int = 0) -> datetime:
    return NINE + timedelta(minutes=minute, seconds=second)


async def create(container: Container, **kw: object) -> Schedule:
    spec = definition(
        name="minutely", cron="* * * * *", timezone="UTC", action=Action.EVENT, target=None, **kw
    )
    created = await schedule_svc.create_schedule(
        container.uow_factory(),
        spec,
        tenant_id="tenant-a",
        clock=container.clock,
        new_secret=container.new_secret,
        limits=Entitlements(),
    )
    return created.schedule


async def move_back(container: Container, schedule_id: str, to: datetime) -> None:
    async with container.engine.begin() as conn:
        await conn.execute(
            sa.update(schedules).where(schedules.c.id == schedule_id).values(next_run_at=to)
        )


async def state(container: Container, schedule_id: str) -> tuple[str, int, datetime | None, int]:
    async with container.engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(
                    schedules.c.state, schedules.c.planned_runs, schedules.c.next_run_at
                ).where(schedules.c.id == schedule_id)
            )
        ).one()
        count = (
            await conn.execute(
                sa.select(sa.func.count())
                .select_from(runs)
                .where(runs.c.schedule_id == schedule_id)
            )
        ).scalar_one()
    return row.state, row.planned_runs, row.next_run_at, count


async def test_a_duplicate_does_not_count_toward_max_runs(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    s = await create(container, max_runs=3, misfire_policy=MisfirePolicy.FIRE_ALL)
    assert s.next_run_at == at(1)
    await plan_due(uows, now=mclock(), settings=LOOKAHEAD)  # plans 09:01
    assert await state(container, s.id) == ("active", 1, at(2), 1)
    await move_back(container, s.id, at(1))
    # 09:01 (already planned) and 09:02 fill max_runs' two remaining slots; only 09:02 is new.
    report = await plan_due(uows, now=at(1, 10), settings=LOOKAHEAD)
    assert report.runs_inserted == 1
    assert report.more_due
    assert await state(container, s.id) == ("active", 2, at(3), 2)
    await plan_due(uows, now=at(2, 10), settings=LOOKAHEAD)
    assert await state(container, s.id) == ("completed", 3, None, 3)


async def test_skip_events_only_for_rows_inserted(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    s = await create(container, misfire_policy=MisfirePolicy.SKIP)

    async def skipped_events() -> int:
        async with container.engine.connect() as conn:
            q = sa.select(sa.func.count()).where(outbox.c.type == "schedule.run.skipped")
            return int((await conn.execute(q)).scalar_one())

    late = at(5, 30)  # 09:01-09:04 missed: skipped rows, each with its event
    first = await plan_due(uows, now=late, settings=LOOKAHEAD)
    assert first.runs_inserted == 6  # 4 skipped, 09:05 and 09:06 pending
    assert await skipped_events() == 4
    await move_back(container, s.id, at(1))
    again = await plan_due(uows, now=late, settings=LOOKAHEAD)
    assert (again.runs_inserted, again.earliest_pending) == (0, None)
    assert await skipped_events() == 4
    assert await state(container, s.id) == ("active", 6, at(7), 6)
