"""overlap_policy buffer_one with a slow receiver (a real HTTP server on loopback that holds the
first request while the clock moves past two more occurrences of an every-minute schedule):
occurrence 2 waits, unattempted, and starts the moment occurrence 1 finishes; occurrence 3 is
skipped (overlap); occurrence 2's lag counts from its scheduled_for. The dispatcher is driven
step by step on a manual clock, renewing its leases as its loop would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest
from aiohttp import web

import webhookdeliver as wd
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.policies import MisfirePolicy, OverlapPolicy
from scheduler.service_layer.planning_service import plan_due
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import (
    PLAN,
    attempt_rows,
    make_dispatcher,
    plan_at_occurrence,
    run_rows,
)


class HoldFirst:
    """Holds the first request until `release` is set; answers every later one at once. Records
    each request's X-Webhook-Id and the manual clock's time when it arrived and when answered."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.release = asyncio.Event()
        self.arrived: list[tuple[str, datetime]] = []
        self.answered: list[tuple[str, datetime]] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        wid = request.headers["X-Webhook-Id"]
        self.arrived.append((wid, self.clock()))
        if len(self.arrived) == 1:
            await asyncio.wait_for(self.release.wait(), timeout=30)
        self.answered.append((wid, self.clock()))
        return web.Response(text="ok")

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{self.port}/hook"


@pytest.fixture
async def holder(mclock: ManualClock) -> AsyncIterator[HoldFirst]:
    h = HoldFirst(mclock)
    yield h
    h.release.set()
    if h.runner is not None:
        await h.runner.cleanup()


async def _until(predicate: object, what: str) -> None:
    for _ in range(500):
        if callable(predicate) and predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_second_occurrence_waits_for_the_first_and_the_third_is_skipped(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    holder: HoldFirst,
    deliverer: wd.Deliverer,
) -> None:
    url = await holder.start()
    s = await add_schedule(
        container,
        url,
        overlap=OverlapPolicy.BUFFER_ONE,
        misfire=MisfirePolicy.FIRE_ALL,
        timeout_seconds=60,
    )
    d = make_dispatcher(container, uows, deliverer)
    assert s.next_run_at is not None
    t1 = s.next_run_at

    # Occurrence 1 starts; the receiver holds it.
    await plan_at_occurrence(uows, mclock, s)
    assert (await d.pump())[0] == 1
    await _until(lambda: len(holder.arrived) == 1, "the first request")

    # Occurrence 2 comes while 1 is held: claimed, then put back to wait, unattempted.
    mclock.set(t1 + timedelta(minutes=1))
    await d.extend_leases_once()
    await plan_due(uows, now=mclock(), settings=PLAN)
    await d.pump()
    await d.write_once()
    # Occurrence 3 comes, 1 still held, 2 waiting: 3 is skipped (overlap); 2 still waits.
    mclock.set(t1 + timedelta(minutes=2))
    await d.extend_leases_once()
    await plan_due(uows, now=mclock(), settings=PLAN)
    await d.pump()
    await d.write_once()
    one, two, three = await run_rows(container)
    assert [r.scheduled_for for r in (one, two, three)] == [
        t1,
        t1 + timedelta(minutes=1),
        t1 + timedelta(minutes=2),
    ]
    assert (one.status, two.status, two.attempt_count) == ("in_progress", "pending", 0)
    assert (three.status, three.skip_reason) == ("skipped", "overlap")
    assert len(holder.arrived) == 1  # nothing but occurrence 1 reached the receiver

    # 1 finishes 1 s later (the clock says; within BUFFER_RECHECK, so only finishing 1 can
    # make 2 due now): 2 is due at once and starts then.
    finished_at = mclock.advance(seconds=1)
    await d.extend_leases_once()
    holder.release.set()
    await d.drain()
    await d.pump()
    await d.drain()

    one, two, three = await run_rows(container)
    assert (one.status, two.status, three.status) == ("succeeded", "succeeded", "skipped")
    assert [w for w, _ in holder.arrived] == [one.id, two.id]
    assert holder.answered[0][0] == one.id  # 1 answered before 2 arrived
    assert len(await attempt_rows(container, two.id)) == 1
    assert two.started_at == finished_at  # claimed (and attempted) when 1 finished
    # Its lag counts from its scheduled_for: the 61 s it waited behind occurrence 1.
    assert two.started_at - two.scheduled_for == timedelta(seconds=61)
    assert await attempt_rows(container, three.id) == []
