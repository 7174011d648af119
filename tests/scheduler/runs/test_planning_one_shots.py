"""A pass that completes many schedules (a herd of one-shots all due at once) saves them in a
few statements whatever their number, and each ends as one completion would: state, version,
its version history (the previous version superseded) and one `schedule.completed` event."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.tables import outbox, runs, schedule_versions, schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.policies import Action
from scheduler.domain.tenant import Entitlements
from scheduler.domain.versions import Actor, Source
from scheduler.service_layer import schedules as schedule_svc
from scheduler.service_layer.planning_service import PlanningSettings, plan_due
from tests.scheduler.definitions import definition
from tests.scheduler.runs.conftest import T0, ManualClock

SETTINGS = PlanningSettings(lookahead=timedelta(seconds=60))
DUE = T0 + timedelta(seconds=20)


async def one_shots(container: Container, n: int, first: int = 0) -> list[str]:
    ids = []
    for i in range(first, first + n):
        spec = definition(name=f"once-{i}", cron=None, run_at=DUE, action=Action.EVENT, target=None)
        created = await schedule_svc.create_schedule(
            container.uow_factory(),
            spec,
            tenant_id=f"tenant-{i % 3}",
            clock=container.clock,
            new_secret=container.new_secret,
            limits=Entitlements(),
        )
        ids.append(created.schedule.id)
    return ids


def counting(container: Container) -> tuple[list[str], Any]:
    """Statements as they reach the driver (an executemany is one): "UPDATE schedules",
    "INSERT INTO schedule_versions", "SELECT"..."""
    seen: list[str] = []

    def capture(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        words = statement.split()
        seen.append(" ".join(words[: {"UPDATE": 2, "INSERT": 3}.get(words[0], 1)]))

    sa.event.listen(container.engine.sync_engine, "before_cursor_execute", capture)
    return seen, capture


async def plan_counting(container: Container, uows: SqlUnitOfWorkFactory) -> tuple[int, list[str]]:
    seen, capture = counting(container)
    try:
        report = await plan_due(uows, now=T0, settings=SETTINGS)
    finally:
        sa.event.remove(container.engine.sync_engine, "before_cursor_execute", capture)
    assert not report.more_due
    return report.schedules, seen


async def test_a_herd_of_one_shots_completes_in_statements_that_do_not_grow_with_it(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    await one_shots(container, 3)
    small, few = await plan_counting(container, uows)
    ids = await one_shots(container, 40, first=3)
    # One of them edited first: its completion supersedes version 2, not the creation's.
    await schedule_svc.update_schedule(
        container.uow_factory(),
        tenant_id="tenant-0",
        schedule_id=ids[0],
        changes={"name": "renamed"},
        expected_version=1,
        clock=container.clock,
        limits=Entitlements(),
    )
    big, many = await plan_counting(container, uows)
    assert (small, big) == (3, 40)
    assert sorted(many) == sorted(few), (few, many)
    assert many.count("UPDATE schedules") <= 3  # next_run_at, planned_runs; the completions
    assert many.count("INSERT INTO schedule_versions") == 1
    assert many.count("UPDATE schedule_versions") == 1

    async with container.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.select(schedules.c.id, schedules.c.state, schedules.c.version).where(
                    schedules.c.id.in_(ids)
                )
            )
        ).all()
        assert {r.state for r in rows} == {"completed"}
        version_of = {r.id: r.version for r in rows}
        assert version_of[ids[0]] == 3
        assert {version_of[i] for i in ids[1:]} == {2}
        run_count = (
            await conn.execute(
                sa.select(sa.func.count()).select_from(runs).where(runs.c.schedule_id.in_(ids))
            )
        ).scalar_one()
        assert run_count == 40
        history = (
            await conn.execute(
                sa.select(
                    schedule_versions.c.schedule_id,
                    schedule_versions.c.version,
                    schedule_versions.c.state,
                    schedule_versions.c.superseded_at,
                ).where(schedule_versions.c.schedule_id.in_(ids))
            )
        ).all()
        latest = {(r.schedule_id, r.version): r for r in history if r.superseded_at is None}
        assert set(latest) == {(i, version_of[i]) for i in ids}
        assert {r.state for r in latest.values()} == {"completed"}
        # Every earlier version was superseded by the completion (or the edit), none left open.
        assert len(history) == sum(version_of.values())
        completed_events = (
            await conn.execute(
                sa.select(sa.func.count())
                .select_from(outbox)
                .where(outbox.c.type == "schedule.completed")
            )
        ).scalar_one()
        assert completed_events == 43


async def test_save_locked_refuses_a_schedule_the_transaction_did_not_lock(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    (sid,) = await one_shots(container, 1)
    async with uows(Actor.system(Source.PLANNER)) as uow:
        schedule = await uow.schedules.get("tenant-0", sid)
        assert schedule is not None
        schedule.complete(T0)
        with pytest.raises(ValueError, match="locked"):
            await uow.schedules.save_locked([schedule])
