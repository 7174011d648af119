"""Flow control in the dispatch pipeline (DESIGN.md §7b), with TWO dispatchers on PostgreSQL
(in one process, each its own pipeline and connections, sharing the work through the database
as two replicas would) against a real loopback receiver: the in-flight limit holds across both;
a 429 with Retry-After holds every run of that destination (no request before the hold ends,
by the injected clock, and no attempt counted), while another destination keeps flowing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

import webhookdeliver as wd
from scheduler.adapters.db.tables import runs
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.service_layer.dispatch_service import RunDispatcher
from scheduler.service_layer.planning_service import plan_due
from servicekit.flow import DestinationPolicy
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import PLAN, make_dispatcher
from tests.scheduler.runs.receiver import Receiver

TENANT = "tenant-a"


@pytest.fixture(autouse=True)
def _postgres_only(container: Container) -> None:
    if container.engine.dialect.name != "postgresql":
        pytest.skip("two dispatchers at once: PostgreSQL (SQLite has one worker process)")


def destination_of(receiver: Receiver, host: str = "127.0.0.1") -> str:
    return f"{host}:{receiver.port}"


async def pump_until(
    dispatchers: list[RunDispatcher],
    mclock: ManualClock,
    done: Callable[[], bool],
    *,
    step_seconds: float = 0.5,
    rounds: int = 400,
) -> None:
    """Claim with both, moving the injected clock on (deferred runs come due), until `done`."""
    for _ in range(rounds):
        if done():
            return
        for d in dispatchers:
            await d.pipeline.pump()
        await asyncio.sleep(0.02)
        for d in dispatchers:
            await d.pipeline.write_once()
        mclock.advance(seconds=step_seconds)
    raise AssertionError("not done in time")


async def plan_burst(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock, url: str, n: int
) -> None:
    """n schedules to `url`, their first occurrence planned, the clock at it."""
    first = None
    for i in range(n):
        s = await add_schedule(container, url, name=f"s{i}")
        first = first or s
    assert first is not None
    assert first.next_run_at is not None
    mclock.set(first.next_run_at)
    await plan_due(uows, now=mclock(), settings=PLAN)


async def statuses(container: Container) -> dict[str, tuple[str, int]]:
    async with container.engine.connect() as conn:
        rows = await conn.execute(sa.select(runs.c.id, runs.c.status, runs.c.attempt_count))
        return {r.id: (r.status, r.attempt_count) for r in rows}


async def test_in_flight_limit_holds_across_two_dispatchers(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    await plan_burst(container, uows, mclock, receiver.url("/slow/150"), 30)
    async with uows() as uow:
        dest = destination_of(receiver)
        await uow.destinations.put_policy(TENANT, dest, DestinationPolicy(3), mclock())
        await uow.commit()
    ds = [make_dispatcher(container, uows, deliverer, concurrency=16) for _ in range(2)]

    await pump_until(ds, mclock, lambda: len(receiver.ids_at("/slow")) >= 30, rounds=600)
    for d in ds:
        await d.pipeline.drain()
    assert receiver.max_active <= 3  # across both dispatchers
    assert receiver.max_active >= 2  # and it did run in parallel
    counts = await statuses(container)
    assert len(counts) == 30
    assert all(n == 1 for _, n in counts.values())  # each delivered once: deferrals count none
    assert ds[0].flow.deferred + ds[1].flow.deferred > 0
    assert all(s == "succeeded" for s, _ in counts.values())


async def test_retry_after_holds_the_destination_not_the_others(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    throttled = await add_schedule(container, receiver.url("/throttle/30"), name="throttled")
    same = [await add_schedule(container, receiver.url("/ok"), name=f"same{i}") for i in range(8)]
    other_url = receiver.url("/ok").replace("127.0.0.1", "localhost")
    other = [await add_schedule(container, other_url, name=f"other{i}") for i in range(5)]
    assert throttled.next_run_at is not None
    ds = [make_dispatcher(container, uows, deliverer, concurrency=16) for _ in range(2)]
    # The throttled run goes first, alone: its 429 + Retry-After: 30 holds the destination.
    mclock.set(throttled.next_run_at)
    held_from = mclock()
    await plan_due(uows, now=mclock(), settings=PLAN)
    # Plan gave every schedule a run due now; the throttled one goes first: the others are
    # due a moment later.
    ids = await statuses(container)
    assert len(ids) == 14
    async with container.engine.begin() as conn:
        await conn.execute(
            sa.update(runs)
            .where(runs.c.schedule_id != throttled.id)
            .values(next_attempt_at=held_from + timedelta(seconds=1))
        )
    await ds[0].pipeline.pump()
    await ds[0].pipeline.drain()
    assert len(receiver.requests) == 1
    st = await statuses(container)
    assert sorted(s for s, _ in st.values()) == ["pending"] * 13 + ["retrying"]
    async with uows() as uow:
        rec = await uow.destinations.get(TENANT, destination_of(receiver))
    assert rec is not None
    assert rec.state.held_until is not None
    held_until = rec.state.held_until
    assert 29 <= (held_until - held_from).total_seconds() <= 31

    mclock.advance(seconds=2)  # the others are due now; the hold is not over

    def others_done() -> bool:
        hosts = [s.headers.get("Host", "") for s in receiver.requests]
        return sum(h.startswith("localhost") for h in hosts) >= 5

    await pump_until(ds, mclock, others_done, step_seconds=1.0, rounds=20)
    assert mclock() < held_until
    hosts = [s.headers.get("Host", "") for s in receiver.requests]
    assert sum(h.startswith("127.0.0.1") for h in hosts) == 1  # only the 429 itself
    st = await statuses(container)
    same_runs = {rid for rid, (s, _) in st.items() if s == "pending"}
    assert len(same_runs) == len(same)
    assert all(st[r][1] == 0 for r in same_runs)  # held: no attempt counted
    # After the hold: every run of the destination goes out, once each.
    mclock.set(held_until)

    def all_same_done() -> bool:
        return len(receiver.ids_at("/ok")) >= 13

    await pump_until(ds, mclock, all_same_done, step_seconds=1.0, rounds=60)
    for d in ds:
        await d.pipeline.drain()
    st = await statuses(container)
    assert sum(1 for s, n in st.values() if s == "succeeded" and n == 1) == len(same) + len(other)


async def due_now(container: Container, at: datetime) -> int:
    async with container.engine.connect() as conn:
        q = (
            sa.select(sa.func.count())
            .select_from(runs)
            .where(runs.c.status == "pending", runs.c.next_attempt_at <= at)
        )
        return int((await conn.execute(q)).scalar_one())


async def test_an_attempts_end_makes_a_run_waiting_for_its_slot_due_at_once(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    """A run deferred for a slot is due again at its spread wait; when one of this worker's
    attempts there ends first, the settle makes one waiting run due at once (in its commit),
    so the destination is not left idle while runs wait. The clock does not move here."""
    await plan_burst(container, uows, mclock, receiver.url("/ok"), 5)
    async with uows() as uow:
        await uow.destinations.put_policy(
            TENANT, destination_of(receiver), DestinationPolicy(2), mclock()
        )
        await uow.commit()
    d = make_dispatcher(container, uows, deliverer, concurrency=16)
    claimed, _ = await d.pipeline.pump()
    assert claimed == 2
    assert d.flow.deferred == 3
    assert await due_now(container, mclock()) == 0  # the 3 wait for a slot, due later
    await d.pipeline.drain()  # the 2 attempts end: 2 slots free, 2 waiting runs due now
    assert await due_now(container, mclock()) == 2
    claimed, _ = await d.pipeline.pump()
    assert claimed == 2
    assert d.flow.deferred == 3
    await d.pipeline.drain()
    assert await due_now(container, mclock()) == 1
    await d.pipeline.pump()
    await d.pipeline.drain()
    st = await statuses(container)
    assert sorted(s for s, _ in st.values()) == ["succeeded"] * 5
    assert all(n == 1 for _, n in st.values())


async def test_a_destination_without_a_row_is_held_by_each_workers_slots(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    """No policy and no state: the claims take no lock and defer nothing; each worker holds the
    default in-flight limit (3 here) with its own slots, so two of them reach 2 x 3 at most.
    A policy set meanwhile is held across both from their next claims on."""
    await plan_burst(container, uows, mclock, receiver.url("/slow/150"), 24)
    # Claims of 6: both workers hold some of the burst (one claim would take it all).
    limits = {"concurrency": 16, "per_key_limit": 3, "claim_batch": 6, "max_claimed": 6}
    ds = [make_dispatcher(container, uows, deliverer, **limits) for _ in range(2)]
    await pump_until(ds, mclock, lambda: len(receiver.ids_at("/slow")) >= 12, rounds=600)
    # Nothing leased only to go back (a limit of 3 counted for both in the database deferred
    # every claim's runs beyond it), and at most each worker's 3 slots at once.
    assert ds[0].flow.deferred + ds[1].flow.deferred == 0
    assert receiver.max_active <= 6
    async with uows() as uow:
        await uow.destinations.put_policy(
            TENANT, destination_of(receiver), DestinationPolicy(2), mclock()
        )
        await uow.commit()
    for d in ds:
        await d.pipeline.drain()
    receiver.max_active = 0
    await pump_until(ds, mclock, lambda: len(receiver.ids_at("/slow")) >= 24, rounds=600)
    for d in ds:
        await d.pipeline.drain()
    assert receiver.max_active <= 2  # the policy, across both
    counts = await statuses(container)
    assert all(n == 1 for _, n in counts.values())
    assert all(s == "succeeded" for s, _ in counts.values())
