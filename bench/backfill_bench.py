"""Backfill's lower-priority lane (DESIGN §6: a backfill never delays live occurrences), PostgreSQL,
one worker (planner + dispatcher, `WorkerRuntime`), loopback receiver in another process:

- `live_alone`: 1,000 schedules (10 tenants) fire at one instant;
- `live_with_backfill`: the same, with a backfill of 10,000 occurrences (quick: 2,000) of another
  tenant's every-minute schedule requested (`service_layer.backfill`, as the API does) 1 s before
  the instant, so most of its runs are due when the live burst comes.
Each reports the live runs' first-attempt lag p50/p99/max and, with the backfill, how many backfill
runs had started by the time the last live run started. Needs BENCH_POSTGRES_URL or
TEST_POSTGRES_URL.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta
from typing import Any

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
from scheduler.bootstrap import Container, utc_now
from scheduler.domain.run import Run, Trigger
from scheduler.entrypoints.workers.runtime import WorkerOptions, WorkerRuntime
from scheduler.service_layer.backfill import backfill
from scheduler.service_layer.dispatch_service import DispatchSettings
from scheduler.service_layer.planning_service import PlanningSettings

LIVE = 1_000
YEARLY = "0 0 1 1 *"  # the measured occurrence is the only live one in the burst


class LiveTally(FirstAttemptTally):
    """The live burst's first attempts; backfill attempts started meanwhile are only counted."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.backfill_started = 0

    def record(self, run: Run, lag_seconds: float) -> None:
        if run.trigger is Trigger.BACKFILL:
            if len(self.lags) < LIVE:
                self.backfill_started += 1
            return
        super().record(run, lag_seconds)


async def _scenario(c: Container, url: str, backfill_runs: int) -> dict[str, Any]:
    fire_at = utc_now() + timedelta(seconds=8)
    await _add_schedules(c, url, LIVE, fire_at, cron=YEARLY)
    runtime = WorkerRuntime(
        c,
        options=WorkerOptions(
            dispatch=DispatchSettings(concurrency=128, per_key_limit=128),
            planning=PlanningSettings(lookahead=timedelta(seconds=10)),
        ),
    )
    tally = LiveTally(fire_at)
    runtime.dispatcher.performer = TallyingPerformer(runtime.dispatcher.performer, tally, c.clock)
    task = asyncio.create_task(runtime.run())
    created = 0
    if backfill_runs:
        # Requested 1 s before the live instant: most of it is still due when the burst comes.
        (sid,) = await _add_schedules(c, url, 1, None, tenant="tenant-bf", id_prefix="F")
        await asyncio.sleep(max((fire_at - utc_now()).total_seconds() - 1.0, 0))
        now = utc_now().replace(second=0, microsecond=0)
        result = await backfill(
            c.uow_factory,
            tenant_id="tenant-bf",
            schedule_id=sid,
            after=now - timedelta(minutes=backfill_runs),
            until=now,
            dry_run=False,
            include_existing=False,
            clock=c.clock,
            wake=runtime.dispatcher.pipeline.wake,
        )
        created = result.created
    deadline = time.monotonic() + 180
    while tally.delivered < LIVE and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await runtime.stop(5)
    await task
    return {
        "backfill_runs_created": created,
        **tally.summary(),
        "backfill_started_before_live_done": tally.backfill_started,
    }


async def _run(quick: bool) -> dict[str, Any]:
    size = 2_000 if quick else 10_000
    report: dict[str, Any] = {"live_schedules": LIVE}
    async with _receiver() as url, _databases() as dbs:
        pg = [db for backend, db in dbs if backend == "postgres"]
        if not pg:
            return {"skipped": "needs BENCH_POSTGRES_URL or TEST_POSTGRES_URL"}
        await upgrade(pg[0])
        c = _container(pg[0])
        try:
            for name, backfill_runs in (("live_alone", 0), ("live_with_backfill", size)):
                await _reset(c)
                report[name] = await _scenario(c, url, backfill_runs)
        finally:
            await c.aclose()
    return report


def run(quick: bool) -> dict[str, Any]:
    return asyncio.run(_run(quick))


if __name__ == "__main__":
    print(json.dumps(run("--quick" in sys.argv), indent=2))
