"""overlap_policy buffer_one with a slow receiver (a real HTTP server on loopback that holds the
first request while the clock moves past two more occurrences of an every-minute schedule):
occurrence 2 waits, unattempted, and starts the moment occurrence 1 finishes; occurrence 3 is
skipped (overlap); occurrence 2's lag counts from its scheduled_for; while it waits it is parked
(claimed again only when occurrence 1 would next move by itself), not polled; and occurrence 1
finishing while 2 is being put back still wakes 2. The dispatcher is driven step by step on a
manual clock, renewing its leases as its loop would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from aiohttp import web

import webhookdeliver as wd
from scheduler.adapters.db.runs.rows import run_to_row
from scheduler.adapters.db.tables import runs
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.policies import MisfirePolicy, OverlapPolicy
from scheduler.domain.run import Run, RunStatus, Trigger
from scheduler.service_layer.dispatch_service import RunDispatcher
from scheduler.service_layer.planning_service import plan_due
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import (
    PLAN,
    attempt_rows,
    claim_runs,
    make_dispatcher,
    plan_at_occurrence,
    run_rows,
    step,
)
from tests.scheduler.runs.receiver import Receiver


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
    assert (await d.pipeline.pump())[0] == 1
    await _until(lambda: len(holder.arrived) == 1, "the first request")

    # Occurrence 2 comes while 1 is held: claimed, then put back to wait, unattempted.
    mclock.set(t1 + timedelta(minutes=1))
    await d.pipeline.extend_leases_once()
    await plan_due(uows, now=mclock(), settings=PLAN)
    await d.pipeline.pump()
    await d.pipeline.write_once()
    # Occurrence 3 comes, 1 still held, 2 waiting: 3 is skipped (overlap); 2 still waits.
    mclock.set(t1 + timedelta(minutes=2))
    await d.pipeline.extend_leases_once()
    await plan_due(uows, now=mclock(), settings=PLAN)
    await d.pipeline.pump()
    await d.pipeline.write_once()
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
    await d.pipeline.extend_leases_once()
    holder.release.set()
    await d.pipeline.drain()
    await d.pipeline.pump()
    await d.pipeline.drain()

    one, two, three = await run_rows(container)
    assert (one.status, two.status, three.status) == ("succeeded", "succeeded", "skipped")
    assert [w for w, _ in holder.arrived] == [one.id, two.id]
    assert holder.answered[0][0] == one.id  # 1 answered before 2 arrived
    assert len(await attempt_rows(container, two.id)) == 1
    assert two.started_at == finished_at  # claimed (and attempted) when 1 finished
    # Its lag counts from its scheduled_for: the 61 s it waited behind occurrence 1.
    assert two.started_at - two.scheduled_for == timedelta(seconds=61)
    assert await attempt_rows(container, three.id) == []


async def _hold_first_and_park_second(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    holder: HoldFirst,
    deliverer: wd.Deliverer,
) -> tuple[RunDispatcher, datetime]:
    """Occurrence 1 attempted and held by the receiver; occurrence 2 planned (due), not claimed.
    Returns the dispatcher holding 1 and occurrence 1's instant."""
    url = await holder.start()
    s = await add_schedule(
        container,
        url,
        overlap=OverlapPolicy.BUFFER_ONE,
        misfire=MisfirePolicy.FIRE_ALL,
        timeout_seconds=60,
    )
    d = make_dispatcher(container, uows, deliverer, lease_seconds=30)
    assert s.next_run_at is not None
    t1 = s.next_run_at
    await plan_at_occurrence(uows, mclock, s)
    assert (await d.pipeline.pump())[0] == 1
    await _until(lambda: len(holder.arrived) == 1, "the first request")
    mclock.set(t1 + timedelta(minutes=1))
    await d.pipeline.extend_leases_once()
    await plan_due(uows, now=mclock(), settings=PLAN)
    return d, t1


async def test_a_waiting_run_is_parked_not_polled_while_its_predecessor_runs(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    holder: HoldFirst,
    deliverer: wd.Deliverer,
) -> None:
    d, t1 = await _hold_first_and_park_second(container, uows, mclock, holder, deliverer)
    assert (await d.pipeline.pump())[0] == 1  # occurrence 2: claimed once, parked
    await d.pipeline.write_once()
    _, two = await run_rows(container)
    # Parked until occurrence 1's lease ends (extended just before: 30 s from now).
    assert (two.status, two.next_attempt_at) == ("pending", mclock() + timedelta(seconds=30))

    # A dispatcher loop's worth of claims over 58 s, leases renewed: 2 s polling claimed (and
    # wrote back) occurrence 2 on every one of these 29 steps; parked, it is claimed when 1's
    # lease was due to end (once; then parked on the renewed lease again).
    claims = 0
    for _ in range(29):
        mclock.advance(seconds=2)
        await d.pipeline.extend_leases_once()
        claims += (await d.pipeline.pump())[0]
        await d.pipeline.write_once()
    assert claims <= 2, claims
    one, two = await run_rows(container)
    assert (one.status, two.status, two.attempt_count) == ("in_progress", "pending", 0)
    assert await attempt_rows(container, two.id) == []
    assert len(holder.arrived) == 1

    # 1 finishes: 2 is due at once (the settle wake-up), not at its parking time.
    finished_at = mclock.advance(seconds=1)
    await d.pipeline.extend_leases_once()
    holder.release.set()
    await d.pipeline.drain()
    assert (await d.pipeline.pump())[0] == 1
    await d.pipeline.drain()
    one, two = await run_rows(container)
    assert (one.status, two.status, two.started_at) == ("succeeded", "succeeded", finished_at)
    assert two.scheduled_for == t1 + timedelta(minutes=1)


async def test_a_predecessor_finishing_while_the_waiting_run_is_put_back_still_wakes_it(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    holder: HoldFirst,
    deliverer: wd.Deliverer,
) -> None:
    holding, _ = await _hold_first_and_park_second(container, uows, mclock, holder, deliverer)
    other = make_dispatcher(container, uows, deliverer, lease_seconds=30)
    assert (await other.pipeline.pump())[
        0
    ] == 1  # occurrence 2 claimed to wait; not written back yet
    # 1 finishes and settles now: its wake-up sees 2 in_progress (claimed), not waiting.
    holder.release.set()
    await holding.pipeline.drain()
    one, two = await run_rows(container)
    assert (one.status, two.status) == ("succeeded", "in_progress")
    await (
        other.pipeline.write_once()
    )  # 2 put back: its own settle sees 1 finished and makes it due now
    _, two = await run_rows(container)
    assert (two.status, two.next_attempt_at) == ("pending", mclock())
    assert (await other.pipeline.pump())[0] == 1
    await other.pipeline.drain()
    _, two = await run_rows(container)
    assert (two.status, len(holder.arrived)) == ("succeeded", 2)


async def _rows_of(container: Container, schedule_id: str) -> list[sa.Row]:
    return [r for r in await run_rows(container) if r.schedule_id == schedule_id]


async def test_a_predecessor_failed_at_take_over_wakes_the_waiting_run(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    # max_attempts 1: occurrence 1's worker dies holding it, so the take-over fails it
    # (`worker_lost`) without an attempt; that too must start the waiting occurrence 2 at once.
    s = await add_schedule(
        container,
        receiver.url("/ok"),
        overlap=OverlapPolicy.BUFFER_ONE,
        misfire=MisfirePolicy.FIRE_ALL,
        max_attempts=1,
    )
    assert s.next_run_at is not None
    t1 = s.next_run_at
    await plan_at_occurrence(uows, mclock, s)
    async with uows() as uow:
        await claim_runs(uow.runs, "dead:1", t1, t1 + timedelta(seconds=90), 10)
        await uow.commit()
    mclock.set(t1 + timedelta(minutes=1))
    await plan_due(uows, now=mclock(), settings=PLAN)
    d = make_dispatcher(container, uows, deliverer, lease_seconds=30)
    assert await step(d) == 1  # occurrence 2 parked until occurrence 1's lease ends
    _, two = await run_rows(container)
    assert (two.status, two.next_attempt_at) == ("pending", t1 + timedelta(seconds=90))

    # A busy claim: another dead worker's run (lease ended earlier) fills the claim's share of
    # runs whose worker died (a quarter of 4: one), so 2 (live lane) is claimed before 1 is
    # taken over, and parks again behind a run nobody will finish.
    other = await add_schedule(container, receiver.url("/ok"), name="yearly", cron="0 0 1 1 *")
    async with container.engine.begin() as conn:
        lost = Run.planned(
            tenant_id=other.tenant_id,
            schedule_id=other.id,
            scheduled_for=t1,
            now=t1,
            trigger=Trigger.MANUAL,
            run_id="run_other_lost",
        )
        lost.status, lost.lease_owner = RunStatus.IN_PROGRESS, "dead:0"
        lost.lease_expires_at = t1 + timedelta(seconds=80)
        await conn.execute(sa.insert(runs).values(run_to_row(lost)))
    mclock.set(t1 + timedelta(seconds=91))
    busy = make_dispatcher(container, uows, deliverer, lease_seconds=30, claim_batch=4)
    assert await step(busy) == 2  # the other lost run, and 2
    _, two = await _rows_of(container, s.id)
    assert (two.status, two.next_attempt_at) == ("pending", mclock() + timedelta(seconds=60))
    assert await step(busy) == 1  # 1 taken over and failed: 2 woken
    assert await step(busy) == 1  # 2 attempted now, not 60 s later
    one, two = await _rows_of(container, s.id)
    assert (one.status, two.status) == ("failed", "succeeded")
    assert two.started_at == mclock()
    sent = [r.headers["X-Webhook-Id"] for r in receiver.requests]
    assert [i for i in sent if i != "run_other_lost"] == [two.id]


@pytest.mark.postgres
async def test_a_predecessor_settling_concurrently_is_waited_for_by_the_parked_check(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    holder: HoldFirst,
    deliverer: wd.Deliverer,
) -> None:
    """READ COMMITTED: 1's settle has written 1 finished (uncommitted) and its wake-up saw 2
    still claimed; 2's settle then parks 2. Its check of 1 must wait for 1's commit and re-read
    1 (FOR SHARE), so 2 is due now. Before, the check read 1's old row (in_progress), and 2
    stayed parked for the 60 s recheck with nobody left to wake it."""
    if container.engine.dialect.name != "postgresql":
        pytest.skip("READ COMMITTED races: PostgreSQL (SQLite has one writer)")
    holding, _ = await _hold_first_and_park_second(container, uows, mclock, holder, deliverer)
    other = make_dispatcher(container, uows, deliverer, lease_seconds=30)
    assert (await other.pipeline.pump())[
        0
    ] == 1  # occurrence 2 claimed to wait; not written back yet
    one, two = await run_rows(container)
    async with container.engine.connect() as settling_one:  # 1's settle, mid-transaction
        await settling_one.execute(
            sa.update(runs)
            .where(runs.c.id == one.id)
            .values(status="succeeded", finished_at=mclock(), lease_owner=None)
        )
        parking = asyncio.create_task(other.pipeline.write_once())
        await asyncio.sleep(0.5)
        assert not parking.done()  # waits for 1's settle instead of reading its old row
        await settling_one.commit()
    await asyncio.wait_for(parking, timeout=30)
    _, two = await run_rows(container)
    assert (two.status, two.next_attempt_at) == ("pending", mclock())
    holder.release.set()
    await holding.pipeline.drain()  # 1's own write finds its lease gone: dropped
