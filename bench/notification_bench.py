"""Notification delivery throughput on PostgreSQL beside the scheduler's dispatch, in one run
against the same loopback receiver (another process), plus the two-replica fault scenario.

- deliveries/s: N deliveries due at once (10,000; quick 2,000) over 100 subscriptions,
  delivered by the production `DeliveryDispatcher.run()` (lease claims, signed POSTs, batched
  compare-and-set completions) with the scheduler bench's dispatch settings (128 in flight, 128
  per endpoint, claims of 100); the scheduler's runs/s through its `WorkerRuntime` on the same
  receiver (bench/dispatch_bench.py's own phase); the ratio (target >= 0.8).
- replicas: two `notification serve` processes on one database, 2,000 deliveries (quick 300),
  lease 3 s, ~6% of answers after 5-6.5 s (tests/notification/replica_fault.py): terminal
  states, lost deliveries, duplicate POSTs and dropped completions.
Fresh databases on BENCH_POSTGRES_URL or TEST_POSTGRES_URL; without one, nothing is measured.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import dispatch_bench
from notification.bootstrap import bootstrap
from servicekit.data.secretbox import generate_key
from tests.notification.replica_fault import (
    create_endpoints,
    insert_due_deliveries,
    replica_settings,
    run_two_replicas,
)

ENDPOINTS = 100


async def notification_throughput(db_url: str, target_url: str, n: int) -> float:
    settings = replica_settings(
        db_url,
        generate_key(),
        dispatch_concurrency=128,
        dispatch_per_endpoint_limit=128,
        dispatch_batch_size=100,
    )
    subs = await create_endpoints(settings, target_url, ENDPOINTS)
    await insert_due_deliveries(settings, subs, n)
    c = bootstrap(settings)
    try:
        dispatcher = c.dispatcher
        started = time.perf_counter()
        task = asyncio.create_task(dispatcher.pipeline.run())
        while dispatcher.pipeline.written < n:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
        await dispatcher.pipeline.stop(5)
        await task
    finally:
        await c.aclose()
    return n / elapsed


async def scheduler_throughput(db_url: str, target_url: str, n: int) -> float:
    await dispatch_bench.upgrade(db_url)
    c = dispatch_bench._container(db_url)
    try:
        ids = await dispatch_bench._add_schedules(c, target_url, ENDPOINTS, None)
        await dispatch_bench._add_due_runs(c, ids, n)
        return await dispatch_bench._service_throughput(c, n)
    finally:
        await c.aclose()


async def _run(quick: bool) -> dict[str, Any]:
    if not (os.environ.get("BENCH_POSTGRES_URL") or os.environ.get("TEST_POSTGRES_URL")):
        return {"skipped": "BENCH_POSTGRES_URL / TEST_POSTGRES_URL not set"}
    n = 2_000 if quick else 10_000
    report: dict[str, Any] = {"deliveries": n}
    rounds: list[dict[str, float]] = []
    async with dispatch_bench._receiver() as url:
        # Alternating order, twice: neither side always runs on a warmer machine.
        for order in (("notification", "scheduler"), ("scheduler", "notification")):
            figures: dict[str, float] = {}
            for side in order:
                async with dispatch_bench._databases() as dbs:
                    db = dict(dbs)["postgres"]
                    if side == "notification":
                        figures["notification_deliveries_per_s"] = round(
                            await notification_throughput(db, url, n), 1
                        )
                    else:
                        figures["scheduler_runs_per_s"] = round(
                            await scheduler_throughput(db, url, n), 1
                        )
            figures["ratio"] = round(
                figures["notification_deliveries_per_s"] / figures["scheduler_runs_per_s"], 2
            )
            rounds.append(figures)
    report["rounds"] = rounds
    report["ratio_min"] = min(r["ratio"] for r in rounds)
    with tempfile.TemporaryDirectory() as tmp:
        async with dispatch_bench._databases() as dbs:
            replicas = await run_two_replicas(
                dict(dbs)["postgres"], Path(tmp), 300 if quick else 2_000, lease_seconds=3.0
            )
    report["two_replicas"] = replicas.as_dict()
    return report


def run(quick: bool) -> dict[str, Any]:
    return asyncio.run(_run(quick))


if __name__ == "__main__":
    print(json.dumps(run("--quick" in sys.argv), indent=2))
