"""Dispatch throughput and scheduling lag, through the service's own worker loop (DESIGN §10).

- throughput: N runs due at once (10,000; quick 2,000), delivered by `RunDispatcher.run()` (claim
  batches, concurrent signed POSTs, batched settles) to a loopback receiver in another process,
  vs a floor script in the same run (claim 100 with SKIP LOCKED, signed POSTs, insert attempts,
  mark done, commit; batch after batch). Peak RSS of this process after the phase.
- lag: p50/p99/max of (first attempt start - scheduled_for) with 1,000 and 10,000 schedules
  (quick: 1,000 only) firing at the same instant, planner + dispatcher (`WorkerRuntime`).
- versus_pgqueuer (PostgreSQL only, as pgqueuer is): a burst of 3,000 runs of 3,000 schedules due at
  one instant, 64 in flight, delivered by our worker in its own process, by two of them against
  the same database (replicas: the scheduler has no `--workers`), and by pgqueuer + aiohttp
  (bench/pgqueuer_baseline.py, its own database). Each side: runs/s from the due instant to the
  last one settled in the database, p50/p99 lag of the arrival at the receiver after the due
  instant, exactly one delivery per run counted at the receiver, CPU ms per delivery of the
  worker process(es) and of the database's PostgreSQL backends (bench/cpu_meter.py), and each
  worker's peak RSS (VmHWM). `ratio` is ours / pgqueuer runs/s, of each side's median round of
  three (quick: one), the sides' order rotating per round. BENCH_PROFILE_OUT=path writes a
  cProfile of our single worker's burst there (the profiler slows that side's figures).
PostgreSQL when BENCH_POSTGRES_URL or TEST_POSTGRES_URL is set (fresh database), and SQLite.
"""

from __future__ import annotations

import asyncio
import base64
import cProfile
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import sqlalchemy as sa
from pydantic import SecretStr
from sqlalchemy.engine import make_url

from authclient import AuthSettings
from bench import pgqueuer_baseline
from bench.cpu_meter import PostgresCpu, peak_rss_mib, process_cpu_seconds
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import UNFINISHED_LIVE_SQL, delivery_attempts, runs, schedules
from scheduler.bootstrap import Container, bootstrap, utc_now
from scheduler.config import SchedulerSettings
from scheduler.domain.run import Run, Trigger
from scheduler.entrypoints.workers.runtime import WorkerOptions, WorkerRuntime
from scheduler.service_layer.dispatch_service import DispatchSettings
from scheduler.service_layer.planning_service import PlanningSettings
from scheduler.service_layer.run_ports import ActionPerformer, ActionResult, DeliverySpec
from servicekit.data.ids import new_id
from servicekit.runtime import event_loop
from servicekit.runtime.gc_tuning import freeze_startup_heap
from webhookdeliver import endpoint_key, sign

SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()
KEY = base64.urlsafe_b64encode(b"k" * 32).decode()
LAG_CRON = "0 0 1 1 *"  # next occurrence after the measured one: months away
RECEIVER = """
import asyncio, sys, time
from aiohttp import web
arrivals = {}  # X-Webhook-Id -> arrival times (wall clock), read by GET /_arrivals
async def ok(request):
    await request.read()
    arrivals.setdefault(request.headers.get("X-Webhook-Id", ""), []).append(time.time())
    return web.Response(text="ok")
async def read_arrivals(request):
    return web.json_response(arrivals)
async def clear_arrivals(request):
    arrivals.clear()
    return web.Response()
app = web.Application()
app.router.add_get("/_arrivals", read_arrivals)
app.router.add_delete("/_arrivals", clear_arrivals)
app.router.add_post("/{tail:.*}", ok)
async def main():
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for port in sys.argv[1:]:
        await web.TCPSite(runner, "127.0.0.1", int(port)).start()
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def _receivers(ports: int) -> AsyncIterator[list[str]]:
    """One receiver process listening on `ports` loopback ports (one destination each); its
    `/_arrivals` (on any of them) holds every port's arrivals."""
    numbers = [_free_port() for _ in range(ports)]
    proc = subprocess.Popen([sys.executable, "-c", RECEIVER, *map(str, numbers)])
    try:
        async with aiohttp.ClientSession() as s:
            for port in numbers:
                for _ in range(100):
                    try:
                        async with s.post(f"http://127.0.0.1:{port}/ok", data=b"{}") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.05)
        yield [f"http://127.0.0.1:{port}/hook" for port in numbers]
    finally:
        proc.terminate()
        proc.wait()


@asynccontextmanager
async def _receiver() -> AsyncIterator[str]:
    async with _receivers(1) as urls:
        yield urls[0]


@asynccontextmanager
async def _databases() -> AsyncIterator[list[tuple[str, str]]]:
    out: list[tuple[str, str]] = []
    tmp = tempfile.TemporaryDirectory()
    out.append(("sqlite", f"sqlite+aiosqlite:///{Path(tmp.name) / 'bench.db'}"))
    base = os.environ.get("BENCH_POSTGRES_URL") or os.environ.get("TEST_POSTGRES_URL")
    name = f"bench_{uuid.uuid4().hex[:10]}"
    admin = None
    if base:
        u = make_url(base)
        admin = u.set(drivername="postgresql", database="postgres").render_as_string(False)
        conn = await asyncpg.connect(admin)
        await conn.execute(f'CREATE DATABASE "{name}"')
        await conn.close()
        out.insert(0, ("postgres", u.set(database=name).render_as_string(False)))
    try:
        yield out
    finally:
        tmp.cleanup()
        if admin:
            conn = await asyncpg.connect(admin)
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await conn.close()


def _container(url: str) -> Container:
    settings = SchedulerSettings(
        database_url=url,
        secret_key=SecretStr(KEY),
        auth_hs256_key=SecretStr("bench-key-" + "x" * 40),
        webhook_allow_private_networks=True,
        # Seeding a million schedules runs statements longer than the service's bounds allow.
        db_statement_timeout_seconds=600,
        db_command_timeout_seconds=630,
    )
    return bootstrap(settings, auth_settings=AuthSettings(AUTH_HS256_KEY=SecretStr("x" * 40)))


async def _reset(c: Container) -> None:
    async with c.engine.begin() as conn:
        for t in (delivery_attempts, runs, schedules):
            await conn.execute(sa.delete(t))


def _schedule_rows(
    c: Container,
    urls: list[str],
    n: int,
    next_run_at: datetime | None = None,
    tenants: int = 10,
    cron: str | None = "* * * * *",
    tenant: str | None = None,
    id_prefix: str = "B",
    run_at: datetime | None = None,
    ulid_ids: bool = False,
) -> list[dict[str, Any]]:
    """n schedules' rows as the repository writes them, their targets spread over `urls`; a
    `run_at` makes one-off schedules (no cron) due then."""
    now = utc_now()
    rows = []
    for i in range(n):
        sid = new_id("sch") if ulid_ids else f"sch_{id_prefix}{i:025d}"
        url = urls[i % len(urls)]
        rows.append(
            {
                "id": sid,
                "tenant_id": tenant or f"tenant-{i % tenants}",
                "name": f"bench-{i}",
                "cron": None if run_at else cron,
                "run_at": run_at,
                "timezone": "UTC",
                "action": "webhook",
                "target": {"url": url, "headers": {}, "timeout_seconds": 10},
                # What the repository writes with the target (flow control counts by it).
                "destination": endpoint_key(url),
                "payload": {"i": i},
                "retry_policy": {
                    "max_attempts": 3,
                    "initial_backoff_seconds": 10.0,
                    "max_backoff_seconds": 60.0,
                    "multiplier": 2.0,
                    "max_retry_duration_seconds": 3600.0,
                },
                "misfire_policy": "fire_all",
                "overlap_policy": "allow",
                "breaker": {"failure_threshold": 5},
                "state": "active",
                "paused_reason": None,
                "next_run_at": run_at or next_run_at,
                "created_at": now,
                "updated_at": now,
                "deleted_at": None,
                "version": 1,
                "consecutive_failures": 0,
                "secret_ciphertext": c.secret_box.encrypt(SECRET, associated=sid),
                "previous_secret_ciphertext": None,
                "previous_secret_expires_at": None,
            }
        )
    return rows


async def _add_schedules(
    c: Container,
    url: str,
    n: int,
    next_run_at: datetime | None,
    tenants: int = 10,
    cron: str = "* * * * *",
    tenant: str | None = None,
    id_prefix: str = "B",
) -> list[str]:
    rows = _schedule_rows(c, [url], n, next_run_at, tenants, cron, tenant, id_prefix)
    async with c.engine.begin() as conn:
        for i in range(0, n, 2000):
            await conn.execute(sa.insert(schedules), rows[i : i + 2000])
    return [str(r["id"]) for r in rows]


async def _add_due_runs(
    c: Container,
    schedule_ids: list[str],
    n: int,
    at: datetime | None = None,
    trigger: str = "manual",
) -> None:
    now = utc_now()
    due = at or now
    rows = []
    for i in range(n):
        sid = schedule_ids[i % len(schedule_ids)]
        rows.append(
            {
                "id": f"run_B{i:025d}",
                "tenant_id": f"tenant-{(i % len(schedule_ids)) % 10}",
                "schedule_id": sid,
                "scheduled_for": due,
                "trigger": trigger,
                "status": "pending",
                "skip_reason": None,
                "attempt_count": 0,
                "next_attempt_at": due,
                "started_at": None,
                "finished_at": None,
                "lease_owner": None,
                "lease_expires_at": None,
                "payload": {"i": i},
                "created_at": now,
            }
        )
    async with c.engine.begin() as conn:
        for i in range(0, n, 2000):
            await conn.execute(sa.insert(runs), rows[i : i + 2000])


async def _count_open(c: Container) -> int:
    async with c.engine.connect() as conn:
        q = sa.select(sa.func.count()).select_from(runs).where(runs.c.status != "succeeded")
        return int((await conn.execute(q)).scalar_one())


async def _service_throughput(c: Container, n: int) -> float:
    runtime = WorkerRuntime(
        c,
        options=WorkerOptions(
            dispatch=DispatchSettings(concurrency=128, per_key_limit=128, claim_batch=100),
            planner=False,
        ),
    )
    started = time.perf_counter()
    task = asyncio.create_task(runtime.run())
    while runtime.metrics.settled_runs._value.get() < n:
        await asyncio.sleep(0.02)
    elapsed = time.perf_counter() - started
    await runtime.stop(5)
    await task
    assert await _count_open(c) == 0
    return n / elapsed


async def _floor_throughput(c: Container, url: str, n: int) -> float:
    """The minimum per run with the same libraries, batch after batch."""
    started = time.perf_counter()
    done = 0
    conn_kw: dict[str, Any] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100, **conn_kw)) as http:
        while done < n:
            now = utc_now()
            async with c.engine.begin() as conn:
                due = (
                    sa.select(runs.c.id)
                    .where(runs.c.status == "pending")
                    .where(runs.c.next_attempt_at <= now)
                    .limit(100)
                    .with_for_update(skip_locked=True)
                )
                claimed = list(
                    await conn.execute(
                        sa.update(runs)
                        .where(runs.c.id.in_(due.scalar_subquery()))
                        .values(status="in_progress")
                        .returning(runs.c.id, runs.c.payload)
                    )
                )
            if not claimed:
                break

            async def post(run_id: str, payload: Any) -> tuple[str, int, float]:
                body = json.dumps(payload).encode()
                ts = int(time.time())
                t0 = time.perf_counter()
                headers = {
                    "X-Webhook-Id": run_id,
                    "X-Timestamp": str(ts),
                    "X-Signature": sign(SECRET, run_id, ts, body),
                    "Content-Type": "application/json",
                }
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
                    return run_id, r.status, (time.perf_counter() - t0) * 1000

            results = await asyncio.gather(*(post(r.id, r.payload) for r in claimed))
            finished = utc_now()
            async with c.engine.begin() as conn:
                await conn.execute(
                    sa.insert(delivery_attempts),
                    [
                        {
                            "run_id": rid,
                            "number": 1,
                            "started_at": now,
                            "duration_ms": int(ms),
                            "status_code": status,
                            "error_kind": None,
                            "error_message": None,
                            "response_excerpt": None,
                        }
                        for rid, status, ms in results
                    ],
                )
                await conn.execute(
                    sa.update(runs).where(runs.c.id == sa.bindparam("b_id")),
                    [
                        {"b_id": rid, "status": "succeeded", "finished_at": finished}
                        for rid, _, _ in results
                    ],
                )
            done += len(claimed)
    return done / (time.perf_counter() - started)


class FirstAttemptTally:
    """First attempts of ONE measured occurrence, by run id (DESIGN §6: one run per occurrence).

    Counting every first-attempt lag the dispatcher reports over-counts whenever a later
    occurrence of the same schedules comes due during the burst (a `* * * * *` schedule whose
    next minute falls inside the look-ahead), though every one of them is a distinct run of a
    distinct occurrence. Later occurrences are counted apart (`other_occurrences`), and a run
    whose first attempt starts twice (a lease lost and the run re-claimed) apart again
    (`repeated`)."""

    def __init__(self, scheduled_for: datetime) -> None:
        self.scheduled_for = scheduled_for
        self.lags: dict[str, float] = {}
        self.repeated = 0
        self.other_occurrences = 0

    def record(self, run: Run, lag_seconds: float) -> None:
        if run.trigger is not Trigger.SCHEDULE or run.attempt_count != 0:
            return
        if run.scheduled_for != self.scheduled_for:
            self.other_occurrences += 1
        elif run.id in self.lags:
            self.repeated += 1
        else:
            self.lags[run.id] = lag_seconds

    @property
    def delivered(self) -> int:
        return len(self.lags)

    def summary(self) -> dict[str, Any]:
        lags = sorted(self.lags.values())
        return {
            "delivered": len(lags),
            "repeated_first_attempts": self.repeated,
            "other_occurrences_started": self.other_occurrences,
            "lag_p50_s": round(lags[len(lags) // 2], 3) if lags else None,
            "lag_p99_s": round(lags[max(int(len(lags) * 0.99) - 1, 0)], 3) if lags else None,
            "lag_max_s": round(lags[-1], 3) if lags else None,
            "lag_min_s": round(lags[0], 3) if lags else None,
        }


class TallyingPerformer:
    """Wraps the runtime's action performer: reports each attempt's start to the tally (the
    dispatcher calls `perform` inside its slots, where it measures first-attempt lag too)."""

    def __init__(self, inner: ActionPerformer, tally: FirstAttemptTally, clock: Any) -> None:
        self.inner = inner
        self.tally = tally
        self.clock = clock

    def concurrency_key(self, spec: DeliverySpec) -> str:
        return self.inner.concurrency_key(spec)

    async def perform(self, run: Run, spec: DeliverySpec, attempt_number: int) -> ActionResult:
        self.tally.record(run, (self.clock() - run.scheduled_for).total_seconds())
        return await self.inner.perform(run, spec, attempt_number)


async def runs_per_occurrence_max(c: Container) -> int:
    """The invariant, read back: the most runs any (schedule, occurrence) has (must be 1)."""
    per = (
        sa.select(sa.func.count().label("n"))
        .select_from(runs)
        .where(runs.c.trigger == "schedule")
        .group_by(runs.c.schedule_id, runs.c.scheduled_for)
        .subquery()
    )
    async with c.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.max(per.c.n)))).scalar() or 0)


async def _lag(c: Container, url: str, n: int) -> dict[str, Any]:
    """n schedules whose next occurrence is the same instant, a few seconds ahead. Their cron is
    yearly so the measured burst holds that one occurrence only (a `* * * * *` schedule's next
    minute may fall inside the look-ahead mid-burst and compete with it)."""
    fire_at = utc_now() + timedelta(seconds=6)
    await _add_schedules(c, url, n, fire_at, cron=LAG_CRON)
    runtime = WorkerRuntime(
        c,
        options=WorkerOptions(
            dispatch=DispatchSettings(concurrency=128, per_key_limit=128),
            planning=PlanningSettings(lookahead=timedelta(seconds=10)),
        ),
    )
    tally = FirstAttemptTally(fire_at)
    runtime.dispatcher.performer = TallyingPerformer(runtime.dispatcher.performer, tally, c.clock)
    task = asyncio.create_task(runtime.run())
    deadline = time.monotonic() + 120
    while tally.delivered < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await runtime.stop(5)
    await task
    out: dict[str, Any] = {"schedules": n, **tally.summary()}
    out["runs_per_occurrence_max"] = await runs_per_occurrence_max(c)
    return out


BURST_RUNS = 3_000
BURST_IN_FLIGHT = 64
BURST_LEAD_SECONDS = 2.0
"""The burst is written this long before it is due: the workers are up and idle by then."""
BURST_DEADLINE_SECONDS = 120.0
ROOT = Path(__file__).resolve().parent.parent


def _pctl(values: list[float], q: float) -> float:
    return round(values[max(int(len(values) * q) - 1, 0)], 3)


async def _wait_line(proc: subprocess.Popen[str], expected: str, timeout: float) -> None:
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)
    if line.strip() != expected:
        raise RuntimeError(f"worker process said {line!r}, expected {expected!r}")


async def _burst(
    argvs: list[list[str]],
    fill: Any,
    open_sql: tuple[str, str],
    dsn: str,
    database: str,
    receiver: str,
    n: int,
) -> dict[str, Any]:
    """Start the worker processes, write the burst (`await fill(due)`), start them, and measure
    until the first query of `open_sql` (an index probe: is any item unfinished?) reads false;
    then its second (a count of what did not succeed) must read 0. CPU windows: from `go` to
    that moment. The probe is polled every 20 ms, on a core the measured processes share: a
    count over the table cost as much PostgreSQL CPU as a fifth of our claims and settles."""
    any_open, count_open = open_sql
    arrivals_url = receiver.rsplit("/", 1)[0] + "/_arrivals"
    env = {**os.environ, "BENCH_WEBHOOK_SECRET": SECRET}
    procs = [
        subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for argv in argvs
    ]
    try:
        for p in procs:
            await _wait_line(p, "ready", 60)
        async with aiohttp.ClientSession() as http:
            async with http.delete(arrivals_url) as r:
                r.raise_for_status()
            due = utc_now() + timedelta(seconds=BURST_LEAD_SECONDS)
            await fill(due)
            late_fill = utc_now() >= due
            async with PostgresCpu(dsn, database) as pg:
                cpu0 = [process_cpu_seconds(p.pid) or 0.0 for p in procs]
                for p in procs:
                    assert p.stdin is not None
                    p.stdin.write("go\n")
                    p.stdin.flush()
                deadline = time.monotonic() + BURST_DEADLINE_SECONDS
                while await pg.fetchval(any_open) and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                done_at = time.time()
                cpu1 = [process_cpu_seconds(p.pid) or 0.0 for p in procs]
                rss = [peak_rss_mib(p.pid) for p in procs]
                still_open = int(await pg.fetchval(count_open) or 0)  # type: ignore[call-overload]
            async with http.get(arrivals_url) as r:
                arrivals: dict[str, list[float]] = await r.json()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("stop\n")
            p.stdin.flush()
        for p in procs:
            p.wait(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if still_open:
        raise RuntimeError(f"{still_open} of {n} runs still open after {BURST_DEADLINE_SECONDS}s")
    repeated = sum(1 for times in arrivals.values() if len(times) != 1)
    if len(arrivals) != n or repeated:
        raise RuntimeError(f"{len(arrivals)} ids delivered of {n}, {repeated} more than once")
    lags = sorted(times[0] - due.timestamp() for times in arrivals.values())
    process_ms = (sum(cpu1) - sum(cpu0)) * 1000 / n
    pg_ms = pg.seconds * 1000 / n if pg.seconds is not None else None
    return {
        "workers": len(procs),
        "runs_per_s": round(n / (done_at - due.timestamp()), 1),
        "lag_p50_s": _pctl(lags, 0.5),
        "lag_p99_s": _pctl(lags, 0.99),
        "lag_max_s": round(lags[-1], 3),
        "cpu_ms_per_delivery": {
            "process": round(process_ms, 3),
            "postgres": round(pg_ms, 3) if pg_ms is not None else None,
            "total": round(process_ms + pg_ms, 3) if pg_ms is not None else None,
        },
        "peak_rss_mib": rss,
        "late_fill": late_fill,
    }


async def _versus_pgqueuer(c: Container, db: str, url: str, rounds: int) -> dict[str, Any]:
    """Each side once per round, the order rotating, so a noisy neighbour hits all of them; each
    side's figures are those of its median round by runs/s (all rounds' runs/s beside them)."""
    n = BURST_RUNS
    ours_db = make_url(db)
    dsn = ours_db.set(drivername="postgresql").render_as_string(False)
    ours_argv = [sys.executable, "-m", "bench.dispatch_bench", "--worker", db, str(BURST_IN_FLIGHT)]
    name = f"bench_pgq_{uuid.uuid4().hex[:10]}"
    admin = ours_db.set(drivername="postgresql", database="postgres").render_as_string(False)
    pgq_dsn = ours_db.set(drivername="postgresql", database=name).render_as_string(False)
    pgq_argv = [sys.executable, "-m", "bench.pgqueuer_baseline", pgq_dsn, str(BURST_IN_FLIGHT)]

    async def ours(workers: int) -> dict[str, Any]:
        await _reset(c)
        ids = await _add_schedules(c, url, n, None, cron=LAG_CRON)

        async def fill(due: datetime) -> None:
            await _add_due_runs(c, ids, n, at=due, trigger="schedule")

        argvs = [ours_argv + (["--profile"] if workers == 1 else []) for _ in range(workers)]
        got = await _burst(argvs, fill, OPEN_RUNS, dsn, str(ours_db.database), url, n)
        got["attempts_by_outcome"] = await _attempts_by_outcome(c)
        return got

    async def pgqueuer() -> dict[str, Any]:
        conn = await asyncpg.connect(pgq_dsn)
        try:
            await conn.execute("TRUNCATE pgqueuer_log")

            async def fill(due: datetime) -> None:
                await pgqueuer_baseline.enqueue_burst(pgq_dsn, url, n, due)

            got = await _burst([pgq_argv], fill, pgqueuer_baseline.OPEN_JOBS, pgq_dsn, name, url, n)
            succeeded = await conn.fetchval(pgqueuer_baseline.SUCCEEDED_JOBS)
        finally:
            await conn.close()
        if succeeded != n:
            raise RuntimeError(f"pgqueuer logged {succeeded} successful jobs of {n}")
        return got

    sides: list[tuple[str, Any]] = [
        ("pgqueuer", pgqueuer),
        ("ours", lambda: ours(1)),
        ("ours_2_processes", lambda: ours(2)),
    ]
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in sides}
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    try:
        await pgqueuer_baseline.install(pgq_dsn)
        for r in range(rounds):
            for label, side in sides[r % 3 :] + sides[: r % 3]:
                results[label].append(await side())
    finally:
        conn = await asyncpg.connect(admin)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()
    out: dict[str, Any] = {
        "runs": n,
        "in_flight": BURST_IN_FLIGHT,
        "rounds": rounds,
        "ours_loop": event_loop.loop_name(),
        "pgqueuer_loop": "uvloop",
    }
    for label, got in results.items():
        by_speed = sorted(got, key=lambda g: float(g["runs_per_s"]))
        out[label] = {
            **by_speed[len(by_speed) // 2],
            "runs_per_s_rounds": [g["runs_per_s"] for g in got],
        }
    out["ratio"] = round(out["ours"]["runs_per_s"] / out["pgqueuer"]["runs_per_s"], 2)
    out["ratio_2_processes"] = round(
        out["ours_2_processes"]["runs_per_s"] / out["pgqueuer"]["runs_per_s"], 2
    )
    return out


OPEN_RUNS = (
    f"SELECT EXISTS (SELECT 1 FROM runs WHERE {UNFINISHED_LIVE_SQL})",
    "SELECT count(*) FROM runs WHERE status <> 'succeeded'",
)
"""ix_runs_schedule_unfinished answers the probe (the burst's runs are planned runs)."""


async def _attempts_by_outcome(c: Container) -> dict[str, int]:
    """Every attempt of the burst by error kind ("ok" for none): more than one per run means
    retries, which the receiver's count of first arrivals alone would not show."""
    kind = sa.func.coalesce(delivery_attempts.c.error_kind, "ok")
    q = sa.select(kind, sa.func.count()).group_by(kind)
    async with c.engine.connect() as conn:
        return {str(k): int(v) for k, v in await conn.execute(q)}


async def _worker(db: str, concurrency: int, profile: bool) -> None:
    """One of our worker processes for `_burst`: dispatcher only, `ready`/`go`/`stop` on stdio."""
    c = _container(db)
    runtime = WorkerRuntime(
        c,
        options=WorkerOptions(
            dispatch=DispatchSettings(concurrency=concurrency, per_key_limit=concurrency),
            planner=False,
        ),
    )
    freeze_startup_heap()  # as the worker entrypoints do
    print("ready", flush=True)
    if (await asyncio.to_thread(sys.stdin.readline)).strip() != "go":
        await c.aclose()
        return
    out = os.environ.get("BENCH_PROFILE_OUT") if profile else None
    profiler = cProfile.Profile() if out else None
    if profiler:
        profiler.enable()
    task = asyncio.create_task(runtime.run())
    await asyncio.to_thread(sys.stdin.readline)  # "stop" or EOF
    if profiler and out:
        profiler.disable()
        profiler.dump_stats(out)
    await runtime.stop(5)
    await task
    await c.aclose()


async def _run(quick: bool) -> dict[str, Any]:
    n = 2_000 if quick else 10_000
    report: dict[str, Any] = {"runs": n}
    async with _receiver() as url, _databases() as dbs:
        for backend, db in dbs:
            await upgrade(db)
            c = _container(db)
            try:
                out: dict[str, Any] = {}
                ids = await _add_schedules(c, url, 100, None)
                await _add_due_runs(c, ids, n)
                out["service_runs_per_s"] = round(await _service_throughput(c, n), 1)
                out["peak_rss_mib"] = round(
                    resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
                )
                await _reset(c)
                ids = await _add_schedules(c, url, 100, None)
                await _add_due_runs(c, ids, n)
                out["floor_runs_per_s"] = round(await _floor_throughput(c, url, n), 1)
                out["ratio_to_floor"] = round(
                    out["service_runs_per_s"] / out["floor_runs_per_s"], 2
                )
                out["lag"] = []
                for size in (1_000,) if quick else (1_000, 10_000):
                    await _reset(c)
                    out["lag"].append(await _lag(c, url, size))
                if backend == "postgres":
                    out["versus_pgqueuer"] = await _versus_pgqueuer(
                        c, db, url, rounds=1 if quick else 3
                    )
                report[backend] = out
            finally:
                await c.aclose()
    return report


def run(quick: bool) -> dict[str, Any]:
    return asyncio.run(_run(quick))


async def _versus_only(rounds: int) -> dict[str, Any]:
    """`python -m bench.dispatch_bench --versus [ROUNDS]`: the versus_pgqueuer phase alone (for
    measuring one lever at a time; `make bench` runs it as part of the whole)."""
    async with _receiver() as url, _databases() as dbs:
        backend, db = dbs[0]
        if backend != "postgres":
            raise SystemExit("--versus needs BENCH_POSTGRES_URL or TEST_POSTGRES_URL")
        await upgrade(db)
        c = _container(db)
        try:
            return await _versus_pgqueuer(c, db, url, rounds=rounds)
        finally:
            await c.aclose()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        # The loop every entrypoint runs on (uvloop where installed), as the worker would.
        event_loop.run(_worker(sys.argv[2], int(sys.argv[3]), "--profile" in sys.argv[4:]))
    elif sys.argv[1:2] == ["--versus"]:
        # Checked before any database is touched: a bad count fails at once, in one line.
        given = (sys.argv[2:] or ["3"])[0]
        try:
            rounds = int(given)
        except ValueError:
            rounds = 0
        if rounds < 1:
            raise SystemExit(f"--versus ROUNDS must be an integer of at least 1, not {given!r}")
        print(json.dumps(asyncio.run(_versus_only(rounds)), indent=2))
    else:
        print(json.dumps(run("--quick" in sys.argv), indent=2))
