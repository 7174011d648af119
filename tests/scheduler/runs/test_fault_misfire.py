"""Misfire after an outage, with real worker processes on PostgreSQL (DESIGN.md §6): runs planned
ahead before the worker died are judged by misfire_policy when they are finally claimed (the
defect: a `* * * * *` fire_once schedule delivered all three missed minutes late).

Time is injected, never waited for: worker A runs 30 s before occurrence M on a shifted clock and
plans M, M+1m and M+2m ahead; it is SIGKILLed; worker B comes back at M+2m30s (2.5 minutes on, on
its own shifted clock: tests/scheduler/runs/shifted_worker.py). M and M+1m are missed (later than
the 60 s grace), M+2m is 30 s late, within it."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.tables import runs, schedules
from scheduler.bootstrap import Container, utc_now
from scheduler.domain.policies import MisfirePolicy
from tests.scheduler.runs.conftest import add_schedule
from tests.scheduler.runs.processes import worker_env
from tests.scheduler.runs.receiver import Receiver
from tests.support.processes import ServiceProcess, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

MINUTE = timedelta(minutes=1)


class ShiftedWorker(ServiceProcess):
    """The real worker process whose clock reads `at` when it starts (and runs on from there)."""

    def __init__(self, pg_url: str, workdir: Path, at: datetime, *args: str) -> None:
        offset = (at - utc_now()).total_seconds()
        env = worker_env(pg_url, TEST_CLOCK_OFFSET_SECONDS=f"{offset:.6f}")
        super().__init__(
            "tests.scheduler.runs.shifted_worker",
            workdir,
            env=env,
            args=("--port", "{port}", *args),
            name="shifted-worker",
        )


async def planned_runs(c: Container) -> list[tuple[str, datetime, str, str | None]]:
    async with c.engine.connect() as conn:
        q = (
            sa.select(runs.c.schedule_id, runs.c.scheduled_for, runs.c.status, runs.c.skip_reason)
            .where(runs.c.trigger == "schedule")
            .order_by(runs.c.schedule_id, runs.c.scheduled_for)
        )
        return [(r[0], r[1], r[2], r[3]) for r in await conn.execute(q)]


async def test_runs_planned_before_an_outage_are_judged_by_misfire_policy(
    real: Container, pg_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    once = await add_schedule(real, receiver.url("/ok"), name="once")
    skip = await add_schedule(real, receiver.url("/ok"), name="skip", misfire=MisfirePolicy.SKIP)
    m = (utc_now() + 2 * MINUTE).replace(second=0, microsecond=0)
    async with real.engine.begin() as conn:  # both at the same first occurrence M
        await conn.execute(sa.update(schedules).values(next_run_at=m))
    occurrences = [m, m + MINUTE, m + 2 * MINUTE]

    # Before the outage: A plans M .. M+2m ahead (its look-ahead 150 s), then dies.
    a = ShiftedWorker(pg_url, tmp_path, m - timedelta(seconds=30), "--lookahead", "150")
    await a.start()
    try:

        async def planned_ahead() -> bool:
            return len(await planned_runs(real)) == 6

        await wait_until(planned_ahead, 30, "six runs planned ahead")
        a.kill()
        await a.wait()
    finally:
        await a.aclose()
    before = await planned_runs(real)
    assert {(s, t) for s, t, _, _ in before} == {
        (sid, t) for sid in (once.id, skip.id) for t in occurrences
    }
    assert {st for _, _, st, _ in before} == {"pending"}
    assert not receiver.requests  # A delivered nothing: nothing was due on its clock

    # 2.5 minutes later on B's clock: M and M+1m missed, M+2m within the grace.
    b = ShiftedWorker(pg_url, tmp_path, m + timedelta(seconds=150))
    await b.start()
    try:

        async def judged() -> bool:
            rows = await planned_runs(real)
            done = [r for r in rows if r[1] in occurrences and r[2] in ("succeeded", "skipped")]
            return len(done) == 6

        await wait_until(judged, 45, "the six occurrences delivered or skipped")
        b.terminate()
        assert await b.wait() == 0
    finally:
        await b.aclose()

    rows = await planned_runs(real)
    per_occurrence = Counter((s, t) for s, t, _, _ in rows)
    assert set(per_occurrence.values()) == {1}  # exactly one run per occurrence
    outcome = {(s, t): (st, why) for s, t, st, why in rows if t in occurrences}
    ok, missed = ("succeeded", None), ("skipped", "misfire")
    assert [outcome[(once.id, t)] for t in occurrences] == [missed, ok, ok]
    assert [outcome[(skip.id, t)] for t in occurrences] == [missed, missed, ok]

    # What reached the receiver: among the missed occurrences, fire_once's latest only.
    async with real.engine.connect() as conn:
        q = sa.select(runs.c.id, runs.c.schedule_id, runs.c.scheduled_for)
        by_id = {r[0]: (r[1], r[2]) for r in await conn.execute(q)}
    delivered = Counter(by_id[i] for i in receiver.attempts_by_id)
    missed_times = occurrences[:2]
    assert [k for k in delivered if k[1] in missed_times] == [(once.id, m + MINUTE)]
    assert delivered[(once.id, m + MINUTE)] == 1
    assert delivered[(once.id, m + 2 * MINUTE)] == delivered[(skip.id, m + 2 * MINUTE)] == 1
