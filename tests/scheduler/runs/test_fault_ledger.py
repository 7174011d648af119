"""The ledger explains every minute of a `* * * * *` schedule through faults (issue 27), on
PostgreSQL: a worker SIGKILLed after planning ahead (misfire skips when another comes back 2.5
minutes later), a pause, an edit of the cron, and a tenant suspension. No occurrence is `missing`;
deleting one run row by hand makes exactly that occurrence missing, in the ledger and in the
worker's periodic check.

Time is injected, never waited for: the two real worker processes run on shifted clocks
(shifted_worker.py, as in test_fault_misfire.py); the rest runs in-process on a manual clock that
carries on after them (the planner, a dispatcher delivering to a loopback receiver, the API over
ASGI, the tenant-state projection)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from asgi_lifespan import LifespanManager

import webhookdeliver as wd
from scheduler.adapters.actions import ActionRouter, WebhookAction
from scheduler.adapters.db.tables import runs
from scheduler.bootstrap import Container, utc_now
from scheduler.entrypoints.api.app import app_from_container
from scheduler.service_layer import tenant_events
from scheduler.service_layer.dispatch_service import RunDispatcher
from scheduler.service_layer.event_action import PublishingEventAction
from scheduler.service_layer.ledger_watch import count_missing_once
from scheduler.service_layer.planning_service import plan_due
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import ManualClock, add_schedule, make_container
from tests.scheduler.runs.dispatch_helpers import step
from tests.scheduler.runs.receiver import Receiver
from tests.scheduler.runs.test_fault_misfire import ShiftedWorker, planned_runs
from tests.scheduler.tenant.conftest import platform_event
from tests.support.processes import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)


class World:
    """The in-process side: planner, dispatcher and API on one manual clock."""

    def __init__(self, container: Container, clock: ManualClock, deliverer: wd.Deliverer):
        self.c, self.clock = container, clock
        self.dispatcher = RunDispatcher(
            container.uow_factory,
            ActionRouter(
                WebhookAction(deliverer, clock),
                PublishingEventAction(container.publisher, clock),
            ),
            clock,
            tenants=container.tenants,
            worker_id="ledger-fault",
            rng=random.Random(7),
        )

    async def until(self, at: datetime) -> None:
        """Each minute up to `at`: just after it, plan and dispatch what is due."""
        t = self.clock() + MIN
        t = t.replace(second=1, microsecond=0)
        while t <= at:
            self.clock.set(t)
            await plan_due(self.c.uow_factory, now=t, tenants=self.c.tenants)
            await step(self.dispatcher)
            t += MIN
        self.clock.set(at)
        await plan_due(self.c.uow_factory, now=at, tenants=self.c.tenants)

    async def tenant_event(self, kind: str) -> None:
        event = platform_event(kind, "tenant-a", self.clock())
        await tenant_events.apply_events(self.c.uow_factory(), [event], self.clock())
        await self.c.tenants.refresh()


@pytest.fixture
async def api(pg_url: str) -> AsyncIterator[tuple[Container, ManualClock, httpx.AsyncClient]]:
    clock = ManualClock()
    c = make_container(pg_url, clock)
    app = app_from_container(c)
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://scheduler.test") as h:
            yield c, clock, h
    await c.aclose()


async def ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code < 300, r.text
    return r.json() if r.content else {}


async def read_ledger(h: httpx.AsyncClient, sid: str, start: datetime, end: datetime) -> dict:
    params = {"from": start.isoformat(), "to": end.isoformat()}
    return await ok(await h.get(f"/v1/schedules/{sid}/ledger", params=params, headers=auth()))


async def test_the_ledger_explains_every_minute_through_faults(
    api: tuple[Container, ManualClock, httpx.AsyncClient],
    pg_url: str,
    receiver: Receiver,
    deliverer: wd.Deliverer,
    tmp_path: Path,
) -> None:
    c, clock, h = api
    m = (utc_now() + 2 * MIN).replace(second=0, microsecond=0)
    clock.set(m - 30 * SEC)
    s = await add_schedule(c, receiver.url("/ok"))  # fire_once; first occurrence M
    sid = s.id

    # 1. A worker plans M .. M+2m ahead and is SIGKILLed; another comes back at M+2m30s.
    a = ShiftedWorker(pg_url, tmp_path, m - 25 * SEC, "--lookahead", "150")
    await a.start()
    try:

        async def planned_ahead() -> bool:
            return len(await planned_runs(c)) >= 3

        await wait_until(planned_ahead, 30, "three runs planned ahead")
        a.kill()
        await a.wait()
    finally:
        await a.aclose()
    b = ShiftedWorker(pg_url, tmp_path, m + 150 * SEC)
    await b.start()
    try:

        async def judged() -> bool:
            done = [r for r in await planned_runs(c) if r[2] in ("succeeded", "skipped")]
            return len({r[1] for r in done} & {m, m + MIN, m + 2 * MIN}) == 3

        await wait_until(judged, 45, "M .. M+2m delivered or skipped")
        b.terminate()
        assert await b.wait() == 0
    finally:
        await b.aclose()

    # 2. In-process from M+2m40s: a pause, an edit of the cron, a tenant suspension.
    world = World(c, clock, deliverer)
    clock.set(m + 160 * SEC)
    await world.until(m + 5 * MIN + 30 * SEC)  # M+3m .. M+5m delivered, M+6m planned ahead
    await ok(await h.post(f"/v1/schedules/{sid}/pause", headers=auth()))
    await world.until(m + 8 * MIN + 30 * SEC)  # M+6m skipped at claim; M+7m, M+8m not planned
    await ok(await h.post(f"/v1/schedules/{sid}/resume", headers=auth()))
    await world.until(m + 10 * MIN + 30 * SEC)  # M+9m, M+10m delivered; M+11m planned ahead
    parity = (m + 12 * MIN).minute % 2  # every other minute from M+12m: M+11m's run goes
    edit = {"cron": f"{parity}-59/2 * * * *"}
    await ok(await h.patch(f"/v1/schedules/{sid}", json=edit, headers=auth()))
    await world.until(m + 15 * MIN + 30 * SEC)  # M+12m, M+14m delivered; M+16m planned ahead
    await world.tenant_event("suspended")
    await world.until(m + 18 * MIN + 30 * SEC)  # M+16m, M+18m skipped tenant_suspended
    await world.tenant_event("reinstated")
    await world.until(m + 21 * MIN + 1 * SEC)  # M+20m delivered

    start, end = m - MIN, m + 21 * MIN
    body = await read_ledger(h, sid, start, end)
    got = [
        ((datetime.fromisoformat(i["scheduled_for"]) - m) // MIN, i["version"], i["outcome"])
        + ((i["reason"],) if "reason" in i else ())
        for i in body["items"]
    ]
    assert got == [
        (0, 1, "skipped", "misfire"),  # missed in the outage; fire_once ran the latest
        (1, 1, "succeeded"),
        (2, 1, "succeeded"),
        (3, 1, "succeeded"),
        (4, 1, "succeeded"),
        (5, 1, "succeeded"),
        (6, 2, "skipped", "schedule_paused"),  # planned ahead before the pause
        (7, 2, "not_planned", "paused"),
        (8, 2, "not_planned", "paused"),
        (9, 3, "succeeded"),
        (10, 3, "succeeded"),
        (12, 4, "succeeded"),  # the edited cron: every other minute
        (14, 4, "succeeded"),
        (16, 4, "skipped", "tenant_suspended"),
        (18, 4, "skipped", "tenant_suspended"),
        (20, 4, "succeeded"),
    ]
    summary = body["summary"]
    assert summary["total"] == 16
    assert summary["outcomes"]["missing"] == 0
    assert summary["reasons"] == {
        "skipped": {"misfire": 1, "schedule_paused": 1, "tenant_suspended": 2},
        "not_planned": {"paused": 2},
    }

    # 3. One run row deleted by hand: exactly that occurrence is missing, and counted once.
    async with c.engine.begin() as conn:
        gone = await conn.execute(
            sa.delete(runs).where(runs.c.schedule_id == sid, runs.c.scheduled_for == m + 9 * MIN)
        )
        assert gone.rowcount == 1
    after = await read_ledger(h, sid, start, end)
    changed = [
        (a["scheduled_for"], a["outcome"], b["outcome"])
        for a, b in zip(body["items"], after["items"], strict=True)
        if a != b
    ]
    assert changed == [(iso(m + 9 * MIN), "succeeded", "missing")]
    assert after["summary"]["outcomes"]["missing"] == 1
    first = await count_missing_once(c.uow_factory, clock())
    assert first.missing == 1
    assert (await count_missing_once(c.uow_factory, clock() + MIN)).missing == 0


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")
