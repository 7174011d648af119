"""A burst of every-minute schedules whose NEXT occurrence is planned while the burst is still
being dispatched: the next minute's first attempts must not be counted as the measured
occurrence's.

These tests pin both halves: the service makes exactly one run per occurrence and starts each
run's first attempt once, and the bench's tally counts only the measured occurrence (counting
every first attempt would report twice the schedules here).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import webhookdeliver as wd
from bench.dispatch_bench import FirstAttemptTally, TallyingPerformer, runs_per_occurrence_max
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.service_layer.planning_service import plan_due
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import PLAN, make_dispatcher, run_rows, step
from tests.scheduler.runs.receiver import Receiver

SCHEDULES = 12  # two tenants; small claims make the burst span several steps
CLAIM = 4


async def test_next_occurrence_planned_mid_burst_is_counted_apart(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    first = None
    for i in range(SCHEDULES):
        s = await add_schedule(
            container, receiver.url("/ok"), tenant=f"tenant-{i % 2}", name=f"burst-{i}"
        )
        first = s.next_run_at
    assert first is not None
    second = first + timedelta(minutes=1)

    mclock.set(first - timedelta(seconds=5))  # planned ahead, like the planner's look-ahead
    assert (await plan_due(uows, now=mclock(), settings=PLAN)).runs_inserted == SCHEDULES

    d = make_dispatcher(container, uows, deliverer, claim_batch=CLAIM, concurrency=CLAIM)
    tally = FirstAttemptTally(first)
    d.performer = TallyingPerformer(d.performer, tally, container.clock)

    mclock.set(first)
    assert await step(d) == CLAIM  # the burst starts ...
    # ... and is still going when the next minute enters the look-ahead and comes due.
    mclock.set(second - timedelta(seconds=8))
    assert (await plan_due(uows, now=mclock(), settings=PLAN)).runs_inserted == SCHEDULES
    mclock.set(second + timedelta(seconds=1))
    while await step(d):
        pass

    assert tally.delivered == SCHEDULES  # the old count (every first attempt) was 2x
    assert tally.other_occurrences == SCHEDULES
    assert tally.repeated == 0
    assert tally.summary()["delivered"] == SCHEDULES

    # The invariant behind the figures: one run per occurrence, each delivered once.
    assert await runs_per_occurrence_max(container) == 1
    rows = await run_rows(container)
    assert len(rows) == 2 * SCHEDULES
    assert {r.status for r in rows} == {"succeeded"}
    assert sorted(receiver.attempts_by_id.values()) == [1] * (2 * SCHEDULES)
    assert set(receiver.attempts_by_id) == {r.id for r in rows}


async def test_a_reclaimed_run_is_not_counted_delivered_twice(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    """A lease that expires mid-attempt makes the run claimable again (at-least-once): the tally
    must never count that as another delivered occurrence. The re-claim counts the lost attempt,
    so the redelivery is attempt 2, not a second first attempt."""
    s = await add_schedule(container, receiver.url("/ok"))
    assert s.next_run_at is not None
    mclock.set(s.next_run_at - timedelta(seconds=5))
    await plan_due(uows, now=mclock(), settings=PLAN)
    tally = FirstAttemptTally(s.next_run_at)
    first = make_dispatcher(container, uows, deliverer, lease_seconds=30)
    first.performer = TallyingPerformer(first.performer, tally, container.clock)
    mclock.set(s.next_run_at)
    claimed, _ = await first.pipeline.pump()
    assert claimed == 1
    # The first worker delivers, then "dies" before settling: its result is never written.
    for _ in range(1000):  # bounded wait for the request to arrive (I/O, not time)
        if receiver.attempts_by_id:
            break
        await asyncio.sleep(0.01)
    assert sum(receiver.attempts_by_id.values()) == 1
    # 31 s later its lease has expired; a second worker re-claims it, counting the lost attempt.
    mclock.advance(seconds=31)
    second = make_dispatcher(container, uows, deliverer)
    second.performer = TallyingPerformer(second.performer, tally, container.clock)
    assert await step(second) == 1
    assert tally.delivered == 1
    assert tally.repeated == 0  # attempt 2 is no first attempt
    assert receiver.attempts_by_id[next(iter(tally.lags))] == 2
