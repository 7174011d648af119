"""A run whose worker was lost (its lease expired while in_progress) is taken over with the lost
attempt counted and recorded (domain/run.py, "Lost attempts"): the next attempt goes out as the
next X-Attempt and the attempt log says what the receiver may have seen. SQLite and PostgreSQL
alike; the SIGKILL proof with real processes is in test_fault_processes.py."""

from __future__ import annotations

import json
from datetime import timedelta

import sqlalchemy as sa
from prometheus_client import CollectorRegistry

import webhookdeliver as wd
from scheduler.adapters.db.tables import outbox, runs
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.run import LOST_ATTEMPT_KIND, LOST_ATTEMPT_MESSAGE
from scheduler.entrypoints.api.runs import attempt_out
from scheduler.entrypoints.workers.metrics import WorkerMetrics
from scheduler.service_layer.runs import get_run
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import (
    attempt_rows,
    claim_runs,
    make_dispatcher,
    plan_at_occurrence,
    rows,
    run_rows,
    schedule_row,
    step,
)
from tests.scheduler.runs.receiver import Receiver

LEASE = timedelta(seconds=30)


async def test_a_lost_attempt_is_counted_and_the_redelivery_is_attempt_two(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/ok"))
    await plan_at_occurrence(uows, mclock, s)
    claimed_at = mclock()
    async with uows() as uow:  # a worker claims, (maybe) sends, and dies before settling
        (lost,) = await claim_runs(uow.runs, "dead:1", claimed_at, claimed_at + LEASE, 10)
        await uow.commit()
    assert lost.attempt_count == 0
    mclock.advance(seconds=31)
    assert await step(make_dispatcher(container, uows, deliverer, lease_seconds=30)) == 1

    (seen,) = receiver.requests
    assert seen.headers["X-Attempt"] == "2"
    (run,) = await run_rows(container)
    assert (run.status, run.attempt_count) == ("succeeded", 2)
    first, second = await attempt_rows(container, run.id)
    assert (first.number, first.error_kind, first.status_code) == (1, LOST_ATTEMPT_KIND, None)
    assert first.started_at == claimed_at  # the lost attempt's claim time
    assert first.duration_ms == 0  # unknown: nothing came back
    assert "unknown" in (first.error_message or "")
    assert (second.number, second.status_code) == (2, 200)
    # The API's attempt list says the same.
    detail = await get_run(uows, tenant_id="tenant-a", schedule_id=s.id, run_id=run.id)
    assert [attempt_out(a)["error"] for a in detail.attempts] == [
        {"kind": "worker_lost", "message": LOST_ATTEMPT_MESSAGE},
        None,
    ]


async def test_a_run_lost_twice_counts_both_and_retries_count_them(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    # max_attempts 3: two lost attempts leave one, so a failing third attempt is final.
    s = await add_schedule(container, receiver.url("/fail"), max_attempts=3)
    await plan_at_occurrence(uows, mclock, s)
    for owner in ("dead:1", "dead:2"):
        now = mclock()
        async with uows() as uow:
            (taken,) = await claim_runs(uow.runs, owner, now, now + LEASE, 10)
            await uow.commit()
        mclock.advance(seconds=31)
    assert taken.attempt_count == 1  # the second claimer counted the first lost attempt
    await step(make_dispatcher(container, uows, deliverer, lease_seconds=30))

    assert [r.headers["X-Attempt"] for r in receiver.requests] == ["3"]
    (run,) = await run_rows(container)
    assert (run.status, run.attempt_count) == ("failed", 3)
    got = [(a.number, a.error_kind) for a in await attempt_rows(container, run.id)]
    assert got == [(1, "worker_lost"), (2, "worker_lost"), (3, "http_status")]


async def test_a_claim_with_nothing_expired_records_nothing(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/ok"))
    await plan_at_occurrence(uows, mclock, s)
    now = mclock()
    async with uows() as uow:
        (held,) = await claim_runs(uow.runs, "alive:1", now, now + LEASE, 10)
        await uow.commit()
    mclock.advance(seconds=29)  # the lease still holds: nobody takes it, nothing is lost
    assert await step(make_dispatcher(container, uows, deliverer, lease_seconds=30)) == 0
    (run,) = await run_rows(container)
    assert (run.status, run.attempt_count, run.lease_owner) == ("in_progress", 0, "alive:1")
    assert await attempt_rows(container, held.id) == []


async def test_a_run_lost_max_lease_expiries_times_fails_without_another_attempt(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/ok"), threshold=1)
    await plan_at_occurrence(uows, mclock, s)
    for owner in ("dead:1", "dead:2"):  # two workers die holding it
        now = mclock()
        async with uows() as uow:
            await claim_runs(uow.runs, owner, now, now + LEASE, 10)
            await uow.commit()
        mclock.advance(seconds=31)
    d = make_dispatcher(container, uows, deliverer, lease_seconds=30)
    d.leases.max_lease_expiries = 2
    registry = CollectorRegistry()
    d.leases.observer = WorkerMetrics(registry)
    assert await step(d) == 1  # the second expiry: failed, never attempted again
    lost = registry.get_sample_value(
        "scheduler_runs_worker_lost_total", {"reason": "lease_expiries"}
    )
    assert lost == 1.0  # the metric operators alert on

    assert receiver.requests == []
    (run,) = await run_rows(container)
    assert (run.status, run.attempt_count, run.lease_owner) == ("failed", 2, None)
    got = [(a.number, a.error_kind) for a in await attempt_rows(container, run.id)]
    assert got == [(1, "worker_lost"), (2, "worker_lost")]
    failed = [
        json.loads(r.payload)
        for r in await rows(container, outbox, outbox.c.type == "schedule.run.failed")
    ]
    assert [e["data"]["last_error"]["kind"] for e in failed] == ["worker_lost"]
    assert (await schedule_row(container, s.id)).paused_reason == "breaker"  # it counts
    mclock.advance(minutes=5)
    assert await step(d) == 0  # never claimed again


async def test_a_lost_last_attempt_fails_the_run_without_attempt_max_plus_one(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    # max_attempts 1: the lost attempt was the only one allowed; X-Attempt 2 must never go out.
    s = await add_schedule(container, receiver.url("/ok"), max_attempts=1, threshold=1)
    await plan_at_occurrence(uows, mclock, s)
    now = mclock()
    async with uows() as uow:  # a worker claims and dies before settling
        await claim_runs(uow.runs, "dead:1", now, now + LEASE, 10)
        await uow.commit()
    mclock.advance(seconds=31)
    d = make_dispatcher(container, uows, deliverer, lease_seconds=30)
    assert await step(d) == 1

    assert receiver.requests == []
    (run,) = await run_rows(container)
    assert (run.status, run.attempt_count, run.lease_owner) == ("failed", 1, None)
    got = [(a.number, a.error_kind) for a in await attempt_rows(container, run.id)]
    assert got == [(1, "worker_lost")]
    failed = [
        json.loads(r.payload)
        for r in await rows(container, outbox, outbox.c.type == "schedule.run.failed")
    ]
    assert [e["data"]["last_error"]["kind"] for e in failed] == ["worker_lost"]
    assert "max_attempts 1" in failed[0]["data"]["last_error"]["message"]
    assert (await schedule_row(container, s.id)).paused_reason == "breaker"  # it counts
    mclock.advance(minutes=5)
    assert await step(d) == 0  # never claimed again


async def test_a_lost_run_is_taken_over_in_the_next_claim_whatever_the_backlog(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock, receiver: Receiver
) -> None:
    """Runs whose worker died go first (up to a quarter of the claim): a backlog that fills every
    claim never postpones them, nor their lease-expiry limit. Before, they were taken only with
    what the live due runs left, so under a sustained backlog never."""
    s = await add_schedule(container, receiver.url("/ok"))
    await plan_at_occurrence(uows, mclock, s)
    async with uows() as uow:
        (lost,) = await claim_runs(uow.runs, "dead:1", mclock(), mclock() + LEASE, 10)
        await uow.commit()
    now = mclock() + timedelta(seconds=31)
    async with container.engine.begin() as conn:  # 50 due runs, more than a claim of 10
        await conn.execute(
            sa.insert(runs),
            [
                {
                    "id": f"run_backlog_{i:03d}",
                    "tenant_id": "tenant-a",
                    "schedule_id": s.id,
                    "scheduled_for": now - timedelta(seconds=i),
                    "trigger": "manual",
                    "status": "pending",
                    "attempt_count": 0,
                    "next_attempt_at": now - timedelta(seconds=i),
                    "created_at": now,
                }
                for i in range(50)
            ],
        )
    async with uows() as uow:
        claimed = await claim_runs(uow.runs, "w:1", now, now + LEASE, 10)
        await uow.commit()
    assert len(claimed) == 10
    (taken,) = [r for r in claimed if r.id == lost.id]
    assert taken.attempt_count == 1  # taken over: the lost attempt counted
    assert taken.lease_owner == "w:1"
