"""Flow control per destination (DESIGN.md §7b, issue 30), PostgreSQL, one worker (planner +
dispatcher, `WorkerRuntime`, the serving defaults: 64 in flight, 10 per destination):

- tenant A: 600 runs due at once to a loopback receiver that allows 20 requests/s (a token
  bucket of 20, refilled at 20/s; a 429 beyond, with `Retry-After: 1` or without, per variant).
  Each variant runs with the tenant's policy `per_second: 20` set, or with none (adaptive only).
  Reported: every run succeeded and exactly one 2xx per run at the receiver; the drain time
  (due instant -> the last 2xx) against the ideal 30 s (target <= 1.15 x); the share of 429s
  among the requests after the first 10 s (target <= 5% with the policy, <= 10% adaptive only);
  attempts per run.
- tenant B beside it: 50 schedules that fire 5 s into A's drain, to another receiver: the p50 /
  p99 / max lag of their first attempts (target p99 <= 1 s).
Needs BENCH_POSTGRES_URL or TEST_POSTGRES_URL. Quick: two variants (policy with Retry-After,
adaptive without); full: all four.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import aiohttp
import sqlalchemy as sa

from bench.dispatch_bench import (
    TallyingPerformer,
    _add_schedules,
    _container,
    _databases,
    _free_port,
    _receiver,
    _reset,
)
from bench.fairness_bench import TenantTally
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import destinations, runs, schedules
from scheduler.bootstrap import Container, utc_now
from scheduler.entrypoints.workers.runtime import WorkerOptions, WorkerRuntime
from scheduler.service_layer.dispatch_service import DispatchSettings
from scheduler.service_layer.planning_service import PlanningSettings
from servicekit.flow import tenant_policy
from webhookdeliver import endpoint_key

A_RUNS = 600
RATE = 20.0  # the receiver's requests/s
IDEAL_SECONDS = A_RUNS / RATE
B_SCHEDULES = 50
B_FIRES_AFTER_SECONDS = 5.0
YEARLY = "0 0 1 1 *"
DRAIN_DEADLINE_SECONDS = 240.0
# Enough attempts that a run throttled a few times still succeeds (a 429 is a failed attempt).
A_RETRY = {
    "max_attempts": 20,
    "initial_backoff_seconds": 1.0,
    "max_backoff_seconds": 30.0,
    "multiplier": 2.0,
    "max_retry_duration_seconds": 3600.0,
}
LIMITED = """
import sys, time
from aiohttp import web
rate, retry_after = float(sys.argv[2]), sys.argv[3] == "1"
bucket = {"tokens": rate, "at": time.monotonic()}
log = []  # (wall time, X-Webhook-Id, status)
async def hook(request):
    await request.read()
    now = time.monotonic()
    b = bucket
    b["tokens"] = min(rate, b["tokens"] + rate * (now - b["at"]))
    b["at"] = now
    if b["tokens"] >= 1:
        b["tokens"] -= 1
        status, headers = 200, {}
    else:
        status, headers = 429, ({"Retry-After": "1"} if retry_after else {})
    log.append((time.time(), request.headers.get("X-Webhook-Id", ""), status))
    return web.Response(status=status, headers=headers, text="ok")
async def read_log(request):
    return web.json_response(log)
app = web.Application()
app.router.add_get("/_log", read_log)
app.router.add_post("/hook", hook)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


@asynccontextmanager
async def _limited_receiver(retry_after: bool) -> AsyncIterator[str]:
    port = _free_port()
    args = [sys.executable, "-c", LIMITED, str(port), str(RATE), "1" if retry_after else "0"]
    proc = subprocess.Popen(args)
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(200):
                try:
                    async with s.get(f"http://127.0.0.1:{port}/_log") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()


async def _receiver_log(base: str) -> list[tuple[float, str, int]]:
    async with aiohttp.ClientSession() as s, s.get(f"{base}/_log") as r:
        return [(float(t), str(i), int(st)) for t, i, st in await r.json()]


async def _seed_a(c: Container, url: str, due: datetime, policy: bool) -> None:
    ids = await _add_schedules(c, url, A_RUNS, None, cron=YEARLY, tenant="tenant-a", id_prefix="A")
    rows = [
        {
            "id": f"run_A{i:025d}",
            "tenant_id": "tenant-a",
            "schedule_id": sid,
            "scheduled_for": due,
            "trigger": "manual",
            "status": "pending",
            "attempt_count": 0,
            "next_attempt_at": due,
            "payload": {"i": i},
            "created_at": due,
        }
        for i, sid in enumerate(ids)
    ]
    async with c.engine.begin() as conn:
        await conn.execute(
            sa.update(schedules).where(schedules.c.tenant_id == "tenant-a"),
            {"retry_policy": A_RETRY},
        )
        await conn.execute(sa.insert(runs), rows)
    if policy:
        async with c.uow_factory() as uow:
            await uow.destinations.put_policy(
                "tenant-a", endpoint_key(url), tenant_policy(10, RATE), utc_now()
            )
            await uow.commit()


async def _a_outcome(c: Container) -> dict[str, Any]:
    async with c.engine.connect() as conn:
        q = (
            sa.select(runs.c.status, runs.c.attempt_count, sa.func.count())
            .where(runs.c.tenant_id == "tenant-a")
            .group_by(runs.c.status, runs.c.attempt_count)
        )
        rows = (await conn.execute(q)).all()
    statuses: Counter[str] = Counter()
    attempts: Counter[int] = Counter()
    for status, n_attempts, n in rows:
        statuses[str(status)] += int(n)
        attempts[int(n_attempts)] += int(n)
    return {"statuses": dict(statuses), "attempts_per_run": dict(sorted(attempts.items()))}


async def _variant(c: Container, b_url: str, *, policy: bool, retry_after: bool) -> dict[str, Any]:
    await _reset(c)
    async with c.engine.begin() as conn:
        await conn.execute(sa.delete(destinations))
    async with _limited_receiver(retry_after) as base:
        start = utc_now() + timedelta(seconds=2)
        fire_at = start + timedelta(seconds=B_FIRES_AFTER_SECONDS)
        await _seed_a(c, f"{base}/hook", start, policy)
        await _add_schedules(
            c, b_url, B_SCHEDULES, fire_at, cron=YEARLY, tenant="tenant-b", id_prefix="B"
        )
        runtime = WorkerRuntime(
            c,
            options=WorkerOptions(
                dispatch=DispatchSettings(concurrency=64, per_key_limit=10),
                planning=PlanningSettings(lookahead=timedelta(seconds=10)),
            ),
        )
        tally = TenantTally(fire_at)
        performer = TallyingPerformer(runtime.dispatcher.performer, tally, c.clock)
        runtime.dispatcher.performer = performer
        task = asyncio.create_task(runtime.run())
        deadline = time.monotonic() + DRAIN_DEADLINE_SECONDS
        while time.monotonic() < deadline:
            log = await _receiver_log(base)
            if len({i for _, i, st in log if st == 200}) >= A_RUNS:
                break
            await asyncio.sleep(0.5)
        await runtime.stop(5)
        await task
        log = await _receiver_log(base)
    t0 = start.timestamp()
    oks = Counter(i for _, i, st in log if st == 200)
    last_ok = max((t for t, _, st in log if st == 200), default=t0)
    late = [st for t, _, st in log if t >= t0 + 10]
    b = tally.summary()
    drain = last_ok - t0
    return {
        "policy_per_second": RATE if policy else None,
        "retry_after": retry_after,
        "a_succeeded_at_receiver": len(oks),
        "a_more_than_one_2xx": sum(1 for n in oks.values() if n > 1),
        "a_requests": len(log),
        "a_429": sum(1 for _, _, st in log if st == 429),
        "drain_s": round(drain, 2),
        "drain_vs_ideal": round(drain / IDEAL_SECONDS, 3),
        "share_429_after_10s": round(late.count(429) / len(late), 4) if late else None,
        "a_runs": await _a_outcome(c),
        "b_delivered": b["delivered"],
        "b_lag_p50_s": b["lag_p50_s"],
        "b_lag_p99_s": b["lag_p99_s"],
        "b_lag_max_s": b["lag_max_s"],
        "deferred_by_gate": runtime.dispatcher.flow.deferred,
        "per_second_2xx_429": _timeline(log, t0),
    }


def _timeline(log: list[tuple[float, str, int]], t0: float) -> str:
    """The receiver's answers per second from the due instant, `2xx/429` each."""
    seconds: dict[int, Counter[int]] = {}
    for t, _, st in log:
        seconds.setdefault(int(t - t0), Counter())[st] += 1
    return " ".join(
        f"{seconds.get(k, Counter())[200]}/{seconds.get(k, Counter())[429]}"
        for k in range(min(seconds, default=0), max(seconds, default=-1) + 1)
    )


async def _run(quick: bool) -> dict[str, Any]:
    variants = [(True, True), (False, False)]
    if not quick:
        variants = [(True, True), (True, False), (False, True), (False, False)]
    report: dict[str, Any] = {"a_runs": A_RUNS, "receiver_rate": RATE, "ideal_s": IDEAL_SECONDS}
    async with _receiver() as b_url, _databases() as dbs:
        pg = [db for backend, db in dbs if backend == "postgres"]
        if not pg:
            return {"skipped": "needs BENCH_POSTGRES_URL or TEST_POSTGRES_URL"}
        await upgrade(pg[0])
        c = _container(pg[0])
        try:
            report["variants"] = [
                await _variant(c, b_url, policy=p, retry_after=ra) for p, ra in variants
            ]
        finally:
            await c.aclose()
    return report


def run(quick: bool) -> dict[str, Any]:
    return asyncio.run(_run(quick))


if __name__ == "__main__":
    print(json.dumps(run("--quick" in sys.argv), indent=2))
