"""Tenant fairness at the hot minute (one tenant's burst must not delay another's runs), PostgreSQL,
one worker (planner + dispatcher, `WorkerRuntime`), loopback receiver in another process:

- `b_alone`: tenant B's 50 schedules fire at one instant, nothing else due;
- `a_burst`: the same, while tenant A's 10,000 schedules (quick: 2,000) fire at the same instant
  (A's created first, so creation order favours A);
- `a_backlog`: the same, while tenant A has a standing backlog of 100,000 (quick: 20,000)
  retrying runs already due.
Each reports B's first-attempt lag (attempt start - scheduled_for) p50/p99/max, and the number of
A's runs started by the time B's last one started. Needs BENCH_POSTGRES_URL or TEST_POSTGRES_URL.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from bench.dispatch_bench import (
    FirstAttemptTally,
    TallyingPerformer,
    _add_schedules,
    _container,
    _databases,
    _receiver,
    _reset,
)
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.types import UTCDateTime
from scheduler.bootstrap import Container, utc_now
from scheduler.domain.run import Run
from scheduler.entrypoints.workers.runtime import WorkerOptions, WorkerRuntime
from scheduler.service_layer.dispatch_service import DispatchSettings
from scheduler.service_layer.planning_service import PlanningSettings

B_SCHEDULES = 50
YEARLY = "0 0 1 1 *"  # the measured occurrence is the only one in the burst


class TenantTally(FirstAttemptTally):
    """First attempts of tenant B's runs of the measured occurrence; others are only counted."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.others_started = 0

    def record(self, run: Run, lag_seconds: float) -> None:
        if run.tenant_id == "tenant-b":
            super().record(run, lag_seconds)
        elif len(self.lags) < B_SCHEDULES:
            self.others_started += 1


async def _backlog(c: Container, n: int, schedule_id: str) -> None:
    """n retrying runs of tenant A, due for an hour (a standing backlog of retries)."""
    due = utc_now() - timedelta(hours=1)
    async with c.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "INSERT INTO runs (id, tenant_id, schedule_id, scheduled_for, trigger, status,"
                " attempt_count, next_attempt_at, created_at, payload)"
                " SELECT 'run_A' || lpad(i::text, 25, '0'), 'tenant-a', :sch, :due, 'manual',"
                " 'retrying', 1, :due, :due, '{}' FROM generate_series(1, :n) i"
            ).bindparams(sa.bindparam("due", type_=UTCDateTime())),
            {"sch": schedule_id, "due": due, "n": n},
        )
        await conn.execute(sa.text("ANALYZE runs"))


async def _scenario(c: Container, url: str, a_burst: int, a_backlog: int) -> dict[str, Any]:
    fire_at = utc_now() + timedelta(seconds=8)
    if a_burst:
        await _add_schedules(
            c, url, a_burst, fire_at, cron=YEARLY, tenant="tenant-a", id_prefix="A"
        )
    if a_backlog:
        (sid,) = await _add_schedules(c, url, 1, None, tenant="tenant-a", id_prefix="R")
        await _backlog(c, a_backlog, sid)
    await _add_schedules(
        c, url, B_SCHEDULES, fire_at, cron=YEARLY, tenant="tenant-b", id_prefix="B"
    )
    runtime = WorkerRuntime(
        c,
        options=WorkerOptions(
            dispatch=DispatchSettings(concurrency=128, per_key_limit=128),
            planning=PlanningSettings(lookahead=timedelta(seconds=10)),
        ),
    )
    tally = TenantTally(fire_at)
    runtime.dispatcher.performer = TallyingPerformer(runtime.dispatcher.performer, tally, c.clock)
    task = asyncio.create_task(runtime.run())
    deadline = time.monotonic() + 180
    while tally.delivered < B_SCHEDULES and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await runtime.stop(5)
    await task
    summary = tally.summary()
    return {
        "a_burst_schedules": a_burst,
        "a_retry_backlog": a_backlog,
        "b_delivered": summary["delivered"],
        "b_lag_p50_s": summary["lag_p50_s"],
        "b_lag_p99_s": summary["lag_p99_s"],
        "b_lag_max_s": summary["lag_max_s"],
        "a_started_before_b_done": tally.others_started,
    }


async def _run(quick: bool) -> dict[str, Any]:
    burst, backlog = (2_000, 20_000) if quick else (10_000, 100_000)
    report: dict[str, Any] = {"b_schedules": B_SCHEDULES}
    async with _receiver() as url, _databases() as dbs:
        pg = [db for backend, db in dbs if backend == "postgres"]
        if not pg:
            return {"skipped": "needs BENCH_POSTGRES_URL or TEST_POSTGRES_URL"}
        await upgrade(pg[0])
        c = _container(pg[0])
        try:
            for name, a_burst, a_backlog in (
                ("b_alone", 0, 0),
                ("a_burst", burst, 0),
                ("a_backlog", 0, backlog),
            ):
                await _reset(c)
                report[name] = await _scenario(c, url, a_burst, a_backlog)
        finally:
            await c.aclose()
    return report


def run(quick: bool) -> dict[str, Any]:
    return asyncio.run(_run(quick))


if __name__ == "__main__":
    print(json.dumps(run("--quick" in sys.argv), indent=2))
