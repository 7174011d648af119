"""Versions written by the workers (DESIGN.md §7b), on SQLite and PostgreSQL: the breaker's pause
through the real settle path and the planner's completion are `system`'s, with their source; and
every run cites the schedule version that planned it (`schedule_version`), shown by the API."""

from __future__ import annotations

from datetime import timedelta

import httpx
import sqlalchemy as sa

import webhookdeliver as wd
from scheduler.adapters.db.tables import runs, schedule_versions
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.tenant import Entitlements
from scheduler.domain.versions import Actor, Source
from scheduler.service_layer import schedules as schedule_svc
from scheduler.service_layer.planning_service import plan_due
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import PLAN, make_dispatcher, plan_at_occurrence, step
from tests.scheduler.runs.receiver import Receiver


async def _versions(container: Container, sid: str) -> list[sa.Row]:
    async with container.engine.connect() as conn:
        q = (
            sa.select(schedule_versions)
            .where(schedule_versions.c.schedule_id == sid)
            .order_by(schedule_versions.c.version)
        )
        return list(await conn.execute(q))


async def _run_versions(container: Container, sid: str) -> dict[str, int | None]:
    async with container.engine.connect() as conn:
        q = sa.select(runs.c.trigger, runs.c.schedule_version).where(runs.c.schedule_id == sid)
        return {t: v for t, v in await conn.execute(q)}


async def test_the_breaker_pause_is_a_system_version_by_the_breaker(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
    client: httpx.AsyncClient,
) -> None:
    s = await add_schedule(container, receiver.url("/fail"), max_attempts=1, threshold=1)
    await plan_at_occurrence(uows, mclock, s)
    assert await step(make_dispatcher(container, uows, deliverer)) == 1
    v1, v2 = await _versions(container, s.id)
    assert (v1.version, v1.state, v1.superseded_at) == (1, "active", mclock())
    assert (v2.version, v2.actor, v2.source, v2.state) == (2, "system", "breaker", "paused")
    assert (v2.superseded_at, v2.paused_reason) == (None, "breaker")
    listed = await client.get(f"/v1/schedules/{s.id}/versions", headers=auth())
    assert listed.json()["items"][0] == {
        "version": 2,
        "at": v2.at.isoformat().replace("+00:00", "Z"),
        "actor": "system",
        "source": "breaker",
        "changes": [
            {"field": "paused_reason", "from": None, "to": "breaker"},
            {"field": "state", "from": "active", "to": "paused"},
        ],
    }
    # The failed run was planned by version 1.
    assert await _run_versions(container, s.id) == {"schedule": 1}


async def test_the_planner_completion_is_a_system_version_by_the_planner(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock, receiver: Receiver
) -> None:
    s = await add_schedule(container, receiver.url("/ok"))
    # max_runs 1: the planner plans the one occurrence and completes the schedule.
    await schedule_svc.update_schedule(
        uows(Actor("alice", Source.API)),
        tenant_id="tenant-a",
        schedule_id=s.id,
        changes={"max_runs": 1},
        expected_version=None,
        clock=mclock,
        limits=Entitlements(),
    )
    mclock.advance(minutes=1)
    await plan_due(uows, now=mclock(), settings=PLAN)
    versions = await _versions(container, s.id)
    assert [(v.version, v.actor, v.source, v.state) for v in versions] == [
        (1, "system", "api", "active"),  # created through the service with no actor named
        (2, "alice", "api", "active"),
        (3, "system", "planner", "completed"),
    ]
    assert versions[2].changes == [{"field": "state", "from": "active", "to": "completed"}]
    assert versions[1].changes == [{"field": "max_runs", "from": None, "to": 1}]
    assert await _run_versions(container, s.id) == {"schedule": 2}


async def test_runs_cite_the_version_that_planned_or_asked_for_them(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    client: httpx.AsyncClient,
) -> None:
    s = await add_schedule(container, receiver.url("/ok"))
    await plan_at_occurrence(uows, mclock, s)  # planned by version 1
    patched = await client.patch(
        f"/v1/schedules/{s.id}", json={"payload": {"v": 2}}, headers=auth()
    )
    assert patched.json()["version"] == 2
    manual = (await client.post(f"/v1/schedules/{s.id}/trigger", headers=auth())).json()
    assert manual["schedule_version"] == 2
    replay = await client.post(f"/v1/schedules/{s.id}/runs/{manual['id']}/replay", headers=auth())
    assert replay.json()["schedule_version"] == 2
    await client.post(f"/v1/schedules/{s.id}/pause", headers=auth())
    await client.post(f"/v1/schedules/{s.id}/resume", headers=auth())  # version 4
    start = (mclock() - timedelta(minutes=3)).isoformat()
    filled = await client.post(
        f"/v1/schedules/{s.id}/backfill",
        json={"from": start, "to": (mclock() - timedelta(minutes=2)).isoformat()},
        headers=auth(),
    )
    assert filled.status_code == 202, filled.text
    assert await _run_versions(container, s.id) == {
        "schedule": 1,
        "manual": 2,
        "replay": 2,
        "backfill": 4,
    }
    page = (await client.get(f"/v1/schedules/{s.id}/runs", headers=auth())).json()
    assert {(i["trigger"], i["schedule_version"]) for i in page["items"]} == {
        ("schedule", 1),
        ("manual", 2),
        ("replay", 2),
        ("backfill", 4),
    }
