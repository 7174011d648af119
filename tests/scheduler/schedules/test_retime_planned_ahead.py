"""A timing change and the runs planned ahead under the old timing (domain/retime.py): only the
new timing's next occurrences stay; the occurrences preview counts planned-ahead runs as still
to come; an unrelated edit racing the planner keeps the planner's next_run_at."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa

from scheduler.adapters.db.tables import runs, schedules
from scheduler.bootstrap import Container
from scheduler.service_layer.planning_service import PlanningSettings, plan_due
from tests.scheduler.conftest import StepClock, auth
from tests.scheduler.schedules.conftest import schedule_body

URL = "/v1/schedules/"
NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # where the StepClock starts


def at(minute: int, second: int = 0) -> datetime:
    return NOON + timedelta(minutes=minute, seconds=second)


async def create(client: httpx.AsyncClient, **kw: object) -> dict:
    body = schedule_body(cron="* * * * *", timezone="UTC", **kw)
    r = await client.post(URL, json=body, headers=auth())
    assert r.status_code == 201, r.text
    return r.json()


async def plan(container: Container, now: datetime, lookahead: timedelta) -> int:
    settings = PlanningSettings(lookahead=lookahead)
    inserted = 0
    while True:
        report = await plan_due(container.uow_factory, now=now, settings=settings)
        inserted += report.runs_inserted
        if not report.more_due:
            return inserted


async def stored(container: Container, schedule_id: str) -> tuple[list[datetime], int]:
    async with container.engine.connect() as conn:
        q = (
            sa.select(runs.c.scheduled_for)
            .where(runs.c.schedule_id == schedule_id)
            .order_by(runs.c.scheduled_for)
        )
        planned = list((await conn.execute(q)).scalars())
        count = (
            await conn.execute(
                sa.select(schedules.c.planned_runs).where(schedules.c.id == schedule_id)
            )
        ).scalar_one()
    return planned, count


async def test_a_retime_keeps_only_the_new_timings_next_runs(
    client: httpx.AsyncClient, container: Container, clock: StepClock
) -> None:
    s = await create(client)
    clock.advance(seconds=30)  # 12:00:30
    assert await plan(container, at(0, 30), timedelta(minutes=10)) == 10  # 12:01 ... 12:10
    r = await client.patch(URL + s["id"], json={"cron": "*/5 * * * *"}, headers=auth())
    assert r.status_code == 200, r.text
    # 12:05 and 12:10 are the new timing's next occurrences: kept; the others never fire.
    assert r.json()["next_run_at"] == "2026-03-01T12:15:00Z"
    assert await stored(container, s["id"]) == ([at(5), at(10)], 2)
    # A new end_at before 12:10: that run goes too, and nothing is left to plan.
    r = await client.patch(URL + s["id"], json={"end_at": "2026-03-01T12:07:00Z"}, headers=auth())
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["next_run_at"]) == ("completed", None)
    assert await stored(container, s["id"]) == ([at(5)], 1)
    # Back to every minute: the instants freed are planned again, once each.
    r = await client.patch(
        URL + s["id"], json={"cron": "* * * * *", "end_at": None}, headers=auth()
    )
    assert (r.json()["state"], r.json()["next_run_at"]) == ("active", "2026-03-01T12:01:00Z")
    await plan(container, at(0, 30), timedelta(minutes=10))
    planned, count = await stored(container, s["id"])
    assert planned == [at(m) for m in range(1, 11)]
    assert count == 10


async def test_a_retime_leaves_runs_that_are_due_or_were_attempted(
    client: httpx.AsyncClient, container: Container, clock: StepClock
) -> None:
    s = await create(client)
    await plan(container, at(0, 30), timedelta(minutes=3))  # 12:01, 12:02, 12:03
    async with container.engine.begin() as conn:  # 12:02 was tried once and waits to retry
        await conn.execute(
            sa.update(runs)
            .where(runs.c.scheduled_for == at(2))
            .values(status="retrying", attempt_count=1)
        )
    clock.now = at(1)  # 12:01 is due
    r = await client.patch(URL + s["id"], json={"cron": "30 * * * *"}, headers=auth())
    assert r.status_code == 200, r.text
    # 12:01 is due now, 12:02 was attempted: both stay; 12:03 never fires.
    assert (await stored(container, s["id"]))[0] == [at(1), at(2)]


async def test_occurrences_preview_counts_runs_planned_ahead_as_to_come(
    client: httpx.AsyncClient, container: Container, clock: StepClock
) -> None:
    s = await create(client, max_runs=3)
    clock.advance(seconds=30)
    await plan(container, at(0, 30), timedelta(seconds=60))  # 12:01 planned ahead
    r = await client.get(URL + s["id"] + "/occurrences", headers=auth())
    assert [i["utc"] for i in r.json()["items"]] == [
        "2026-03-01T12:01:00Z",
        "2026-03-01T12:02:00Z",
        "2026-03-01T12:03:00Z",
    ]


async def test_an_edit_racing_the_planner_keeps_its_next_run_at(
    client: httpx.AsyncClient, container: Container, clock: StepClock
) -> None:
    if container.engine.dialect.name == "sqlite":
        pytest.skip("SQLite runs one transaction at a time: the race cannot happen")
    s = await create(client)
    async with container.uow_factory() as api:
        loaded = await api.schedules.get("tenant-a", s["id"])
        assert loaded is not None
        assert loaded.next_run_at == at(1)
        # The planner plans 12:01 and moves next_run_at on, meanwhile, without a new version.
        assert await plan(container, at(0, 30), timedelta(seconds=60)) == 1
        loaded.update({"name": "renamed"}, next_run_at=loaded.next_run_at, now=clock())
        await api.schedules.save(loaded)
        await api.commit()
    got = (await client.get(URL + s["id"], headers=auth())).json()
    assert (got["name"], got["next_run_at"]) == ("renamed", "2026-03-01T12:02:00Z")
