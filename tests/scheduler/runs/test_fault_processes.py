"""Fault proofs with real worker subprocesses on PostgreSQL (DESIGN.md §6): replicas racing,
SIGKILL mid-flight then restart, SIGTERM clean shutdown, the database unreachable for a while
(through a loopback proxy that is cut; the shared server is never stopped)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from scheduler.adapters.db.tables import runs, schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container, utc_now
from scheduler.domain.policies import MisfirePolicy
from scheduler.domain.run import RunStatus
from scheduler.service_layer.runs import get_run, trigger_run
from tests.scheduler.runs.conftest import add_schedule
from tests.scheduler.runs.processes import WorkerProcess, wait_until
from tests.scheduler.runs.receiver import Receiver
from tests.support.processes import equals
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


async def statuses(c: Container, trigger: str | None = None) -> Counter[str]:
    """Runs per status (of one trigger: the every-minute schedule may also fire meanwhile)."""
    async with c.engine.connect() as conn:
        q = sa.select(runs.c.status, sa.func.count()).group_by(runs.c.status)
        if trigger is not None:
            q = q.where(runs.c.trigger == trigger)
        return Counter({s: n for s, n in await conn.execute(q)})


async def all_terminal(c: Container) -> bool:
    """Every run that is due by now is finished (runs planned ahead for a later minute wait;
    a first attempt deferred by flow control is not finished)."""
    async with c.engine.connect() as conn:
        total = (await conn.execute(sa.select(sa.func.count()).select_from(runs))).scalar_one()
        open_ = (
            await conn.execute(
                sa.select(sa.func.count())
                .select_from(runs)
                .where(
                    sa.or_(
                        runs.c.status == "in_progress",
                        sa.and_(
                            runs.c.status.in_(["pending", "retrying"]),
                            runs.c.next_attempt_at <= utc_now(),
                        ),
                        # A first attempt the flow gate deferred (a destination's slots are
                        # full across workers) is pending and due later, yet its occurrence is.
                        sa.and_(runs.c.status == "pending", runs.c.scheduled_for <= utc_now()),
                    )
                )
            )
        ).scalar_one()
    return bool(total) and open_ == 0


async def backdate(c: Container, minutes: int) -> None:
    """Move every schedule's plan position back, as if the service had been down."""
    async with c.engine.begin() as conn:
        start = (utc_now() - timedelta(minutes=minutes)).replace(second=0, microsecond=0)
        await conn.execute(sa.update(schedules).values(next_run_at=start))


async def occurrence_counts(c: Container) -> Counter[tuple[str, datetime]]:
    async with c.engine.connect() as conn:
        q = sa.select(runs.c.schedule_id, runs.c.scheduled_for).where(runs.c.trigger == "schedule")
        return Counter((r[0], r[1]) for r in await conn.execute(q))


async def test_two_replicas_one_run_per_occurrence_never_twice_at_once(
    real: Container, pg_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    for i in range(40):
        await add_schedule(
            real, receiver.url("/slow/30"), name=f"s{i}", misfire=MisfirePolicy.FIRE_ALL
        )
    await backdate(real, 5)  # ~5-6 occurrences due per schedule, planned by both at once
    workers = [
        await WorkerProcess(pg_url, tmp_path, "--lease", "5", "--concurrency", "32").start()
        for _ in range(2)
    ]
    try:
        await wait_until(lambda: all_terminal(real), 60, "every run terminal")
        # The current minute may still add runs; stop both before counting.
        for w in workers:
            w.terminate()
        for w in workers:
            assert await w.wait() == 0
    finally:
        for w in workers:
            await w.aclose()
    counts = await occurrence_counts(real)
    assert len(counts) >= 40 * 5
    assert set(counts.values()) == {1}  # exactly one run per planned occurrence
    assert receiver.max_parallel_per_id == 1  # no run delivered by both at once
    async with real.engine.connect() as conn:
        done = list(await conn.execute(sa.select(runs.c.id).where(runs.c.status == "succeeded")))
    assert len(done) >= 40 * 5
    assert {r[0] for r in done} <= set(receiver.attempts_by_id)


async def test_sigkill_mid_flight_then_restart_loses_nothing(
    real: Container, pg_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    uows = SqlUnitOfWorkFactory(real.engine, real.secret_box)
    s = await add_schedule(real, receiver.url("/slow/1500"), name="slow")
    planned = await add_schedule(
        real, receiver.url("/slow/1500"), name="planned", misfire=MisfirePolicy.FIRE_ALL
    )
    run_ids = [
        (await trigger_run(uows, tenant_id="tenant-a", schedule_id=s.id, clock=utc_now)).id
        for _ in range(20)
    ]
    await backdate(real, 3)
    del planned
    args = ("--lease", "3", "--concurrency", "16")
    first = await WorkerProcess(pg_url, tmp_path, *args).start()
    try:

        async def some_in_flight() -> bool:
            return receiver.in_flight.total() >= 5

        await wait_until(some_in_flight, 45, "attempts in flight")
        first.kill()
        await first.wait()
        assert (await statuses(real))["in_progress"] >= 5  # the dead worker's claims
        second = await WorkerProcess(pg_url, tmp_path, *args).start()
        try:
            await wait_until(lambda: all_terminal(real), 60, "every run terminal after restart")
        finally:
            second.terminate()
            await second.wait()
    finally:
        await first.aclose()
    got = await statuses(real)
    assert got["succeeded"] >= 23
    assert not got["failed"]
    assert not got["in_progress"]
    counts = await occurrence_counts(real)
    assert len(counts) >= 3
    assert set(counts.values()) == {1}
    assert set(run_ids) <= set(receiver.attempts_by_id)  # every X-Webhook-Id seen at least once


async def test_sigkill_mid_delivery_the_redelivery_is_attempt_two_and_attempt_one_is_lost(
    real: Container, pg_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    uows = SqlUnitOfWorkFactory(real.engine, real.secret_box)
    s = await add_schedule(real, receiver.url("/hang-first"), name="hang-first", cron="0 0 1 1 *")
    run = await trigger_run(uows, tenant_id="tenant-a", schedule_id=s.id, clock=utc_now)
    args = ("--lease", "3")
    first = await WorkerProcess(pg_url, tmp_path, *args).start()
    try:
        await wait_until(lambda: receiver.in_flight[run.id] == 1, 30, "attempt 1 at the receiver")
        first.kill()  # mid-delivery: the receiver got the request, no answer was recorded
        await first.wait()
        second = await WorkerProcess(pg_url, tmp_path, *args).start()
        try:

            async def succeeded() -> bool:
                detail = await get_run(uows, tenant_id="tenant-a", schedule_id=s.id, run_id=run.id)
                return detail.run.status is RunStatus.SUCCEEDED

            await wait_until(succeeded, 45, "the run redelivered after the lease expired")
        finally:
            second.terminate()
            await second.wait()
    finally:
        await first.aclose()
    seen = [
        r.headers["X-Attempt"] for r in receiver.requests if r.headers["X-Webhook-Id"] == run.id
    ]
    assert seen == ["1", "2"]  # never attempt 1 twice
    detail = await get_run(uows, tenant_id="tenant-a", schedule_id=s.id, run_id=run.id)
    assert detail.run.attempt_count == 2
    got = [(a.number, a.error_kind, a.status_code) for a in detail.attempts]
    assert got == [(1, "worker_lost", None), (2, None, 200)]
    lost, redelivered = detail.attempts
    assert lost.started_at <= redelivered.started_at


async def test_sigterm_finishes_in_flight_and_releases_the_rest(
    real: Container, pg_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    uows = SqlUnitOfWorkFactory(real.engine, real.secret_box)
    quick = await add_schedule(real, receiver.url("/slow/300"), name="quick")
    stuck = await add_schedule(real, receiver.url("/hang"), name="stuck", timeout_seconds=30)
    for sch in (quick, stuck):
        for _ in range(4):
            await trigger_run(uows, tenant_id="tenant-a", schedule_id=sch.id, clock=utc_now)
    w = await WorkerProcess(pg_url, tmp_path, "--grace", "2", "--lease", "30").start()
    try:
        await wait_until(lambda: receiver.in_flight.total() >= 8, 20, "all 8 attempts in flight")
        w.terminate()
        assert await w.wait(timeout=15) == 0
    finally:
        await w.aclose()
    async with real.engine.connect() as conn:
        rows = list(await conn.execute(sa.select(runs).where(runs.c.trigger == "manual")))
    by = Counter((r.schedule_id, r.status, r.attempt_count, r.lease_owner) for r in rows)
    assert by[(quick.id, "succeeded", 1, None)] == 4  # finished within the grace
    # The hung ones were released: pending again at once, no attempt counted, no lease held.
    assert by[(stuck.id, "pending", 0, None)] == 4


async def test_database_unreachable_for_a_while_workers_recover(
    real: Container, pg_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    uows = SqlUnitOfWorkFactory(real.engine, real.secret_box)
    proxy = TcpProxy("127.0.0.1", make_url(pg_url).port or 5432)
    await proxy.start()
    proxied = make_url(pg_url).set(host="127.0.0.1", port=proxy.port)
    s = await add_schedule(real, receiver.url("/ok"), name="s")
    w = await WorkerProcess(
        proxied.render_as_string(hide_password=False), tmp_path, "--lease", "5"
    ).start()
    try:
        first = await trigger_run(uows, tenant_id="tenant-a", schedule_id=s.id, clock=utc_now)
        await wait_until(lambda: first.id in receiver.attempts_by_id, 45, "first delivery")
        proxy.cut()
        # While the database is unreachable: not ready, still alive, work piles up.
        await wait_until(lambda: equals(w.status("/readyz"), 503), 30, "readyz 503 during outage")
        during = [
            (await trigger_run(uows, tenant_id="tenant-a", schedule_id=s.id, clock=utc_now)).id
            for _ in range(10)
        ]
        assert w.proc is not None
        assert w.proc.returncode is None
        proxy.restore()
        await wait_until(lambda: equals(w.status("/readyz"), 200), 45, "readyz 200 after outage")
        await wait_until(lambda: all_terminal(real), 60, "runs triggered during the outage done")
        assert set(during) <= set(receiver.attempts_by_id)
        assert (await statuses(real, "manual"))["succeeded"] == 11
    finally:
        w.terminate()
        await w.wait()
        await proxy.stop()


def _now() -> datetime:
    return datetime.now(UTC)
