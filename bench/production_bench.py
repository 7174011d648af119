"""The production worker versus pgqueuer, measured as deployed (issue: "faster than pgqueuer,
measured as it is deployed"; DESIGN §10).

Ours is what `deploy/` runs: one `scheduler serve --role worker` process (planner, dispatcher,
outbox relay to a real Kafka-protocol broker, retention, tenant consumer, ledger check,
completion watchdog), started with the CLI and its production defaults, except the dispatch
width, set to pgqueuer's (64 in flight). The burst is 3,000 schedules (one occurrence in the
window: a yearly cron; rows written by SQL as the API stores them) due on the minute at least
BURST_LEAD_SECONDS ahead: the planner plans them inside its 60 s look-ahead, the dispatcher
delivers them to 8 loopback ports of one receiver process (8 destinations), the relay publishes
their events. pgqueuer 1.6.0 does the same signed POSTs to the same ports with the same width in
the same run (bench/pgqueuer_baseline.py). Each round starts each side on a fresh database and
fresh processes; the sides' order alternates per round.

Figures per side: runs/s from the due instant to the last one finished in the database, p50/p99
lag of the first arrival after the due instant, exactly one delivery per run at the receiver,
CPU ms per delivery of the worker process and of its database's PostgreSQL backends from the
due instant to the last one finished (dispatch, settles, events), and CPU seconds from the
moment the burst is written to its due instant (`before_due_cpu_s`: ours plans it and polls;
pgqueuer's enqueue). `ratio` is ours / pgqueuer of each side's median round by
runs/s; every round is listed beside the medians, so a bimodal pattern shows.
`python -m bench.production_bench [ROUNDS]` runs it alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import aiohttp
import asyncpg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from bench import pgqueuer_baseline
from bench.cpu_meter import PostgresCpu, peak_rss_mib, process_cpu_seconds
from bench.dispatch_bench import (
    KEY,
    ROOT,
    SECRET,
    _container,
    _free_port,
    _pctl,
    _receivers,
    _schedule_rows,
)
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import UNFINISHED_LIVE_SQL, runs, schedules
from scheduler.bootstrap import utc_now

RUNS = 3_000
PORTS = 8
IN_FLIGHT = 64
BURST_LEAD_SECONDS = 20.0
"""At least this far ahead, on a minute (cron's resolution): inside the planner's 60 s
look-ahead, so it plans the burst on its next poll, as a top-of-the-hour herd is planned less
than a minute before it falls due."""
DEADLINE_SECONDS = 120.0
OPEN_RUNS = (
    f"SELECT EXISTS (SELECT 1 FROM runs WHERE {UNFINISHED_LIVE_SQL})",
    "SELECT count(*) FROM runs WHERE status <> 'succeeded'",
)


def _next_minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0) + timedelta(minutes=1)


def _tansu() -> Any:
    from tests.support.kafka import running_tansu

    return running_tansu()


@asynccontextmanager
async def _database(base: str) -> AsyncIterator[str]:
    u = make_url(base)
    name = f"bench_prod_{uuid.uuid4().hex[:10]}"
    admin = u.set(drivername="postgresql", database="postgres").render_as_string(False)
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    try:
        yield u.set(database=name).render_as_string(False)
    finally:
        conn = await asyncpg.connect(admin)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()


def _worker_env(db: str, bootstrap: str) -> dict[str, str]:
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SCHEDULER_", "KAFKA_", "WEBHOOK_"))
    }
    return {
        **keep,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("pkg", "services", ".")),
        "SCHEDULER_DATABASE_URL": db,
        "SCHEDULER_SECRET_KEY": KEY,
        "AUTH_HS256_KEY": "bench-key-" + "x" * 40,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_IDEMPOTENT": "false",  # tansu refuses InitProducerId
        "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
        "SCHEDULER_DISPATCH_CONCURRENCY": str(IN_FLIGHT),
    }


async def _log_statements(c: Any, database: str) -> None:
    """BENCH_PG_LOG_STATEMENTS=1: every statement's duration in the server's log;
    BENCH_PG_AUTO_EXPLAIN=MS: the plans (EXPLAIN ANALYZE) of those slower than MS (auto_explain,
    loaded for this database's sessions), for an offline breakdown."""
    settings = []
    if os.environ.get("BENCH_PG_LOG_STATEMENTS"):
        settings.append("log_min_duration_statement = 0")
    if ms := os.environ.get("BENCH_PG_AUTO_EXPLAIN"):
        settings += [
            "session_preload_libraries = 'auto_explain'",
            f"auto_explain.log_min_duration = {int(ms)}",
            "auto_explain.log_analyze = on",
            "auto_explain.log_buffers = on",
        ]
    async with c.engine.begin() as conn:
        for setting in settings:
            await conn.execute(sa.text(f'ALTER DATABASE "{database}" SET {setting}'))


def _py_spy(pid: int) -> subprocess.Popen[bytes] | None:
    """BENCH_PYSPY=path/to/py-spy BENCH_PYSPY_OUT=file.svg: a flame graph of our worker's
    burst, from the due instant to the last run settled (a sampling profiler in another
    process; it slows our side by a few percent)."""
    binary, out = os.environ.get("BENCH_PYSPY"), os.environ.get("BENCH_PYSPY_OUT")
    if not binary or not out:
        return None
    argv = [binary, "record", "--pid", str(pid), "--rate", "250", "--nonblocking", "-o", out]
    if out.endswith(".txt"):
        argv += ["--format", "raw"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _wait_ready(http: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited with {proc.returncode}")
        try:
            async with http.get(url) as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("worker not ready within 60 s")


async def _measure(
    proc: subprocess.Popen[Any],
    dsn: str,
    database: str,
    fill: Any,
    open_sql: tuple[str, str],
    arrivals_url: str,
    due: datetime,
    n: int,
    ready_sql: str | None = None,
    at_due: Callable[[], None] | None = None,
) -> dict[str, Any]:
    any_open, count_open = open_sql
    async with aiohttp.ClientSession() as http:
        async with http.delete(arrivals_url) as r:
            r.raise_for_status()
        async with PostgresCpu(dsn, database) as pg:
            cpu0 = process_cpu_seconds(proc.pid) or 0.0
            await fill()
            await asyncio.sleep(max((due - utc_now()).total_seconds(), 0.0))
            cpu_due = process_cpu_seconds(proc.pid) or 0.0
            pg_due = pg.so_far()
            if at_due is not None:
                at_due()
            deadline = time.monotonic() + DEADLINE_SECONDS
            # Ours: the burst's runs exist once the planner has planned them (before the due
            # instant, unless planning is late; then the lag shows it).
            while ready_sql and not await pg.fetchval(ready_sql) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            while await pg.fetchval(any_open) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            done_at = time.time()
            cpu1 = process_cpu_seconds(proc.pid) or 0.0
            still_open = int(await pg.fetchval(count_open) or 0)  # type: ignore[call-overload]
        async with http.get(arrivals_url) as r:
            arrivals: dict[str, list[float]] = await r.json()
    if still_open:
        raise RuntimeError(f"{still_open} of {n} still open after {DEADLINE_SECONDS}s")
    repeated = sum(1 for t in arrivals.values() if len(t) != 1)
    if len(arrivals) != n or repeated:
        raise RuntimeError(f"{len(arrivals)} ids delivered of {n}, {repeated} more than once")
    lags = sorted(t[0] - due.timestamp() for t in arrivals.values())
    # Per delivery: the burst's window, from the due instant to the last one finished; what
    # came before (ours: planning it, and every loop's idle polls) is `before_due_cpu_s`.
    process_ms = (cpu1 - cpu_due) * 1000 / n
    pg_ms = (
        (pg.seconds - pg_due) * 1000 / n if pg.seconds is not None and pg_due is not None else None
    )
    return {
        "runs_per_s": round(n / (done_at - due.timestamp()), 1),
        "lag_p50_s": _pctl(lags, 0.5),
        "lag_p99_s": _pctl(lags, 0.99),
        "cpu_ms_per_delivery": {
            "process": round(process_ms, 3),
            "postgres": round(pg_ms, 3) if pg_ms is not None else None,
        },
        "peak_rss_mib": peak_rss_mib(proc.pid),
        "before_due_cpu_s": {
            "process": round(cpu_due - cpu0, 3),
            "postgres": round(pg_due, 3) if pg_due is not None else None,
        },
    }


async def _ours(base: str, urls: list[str], bootstrap: str, n: int) -> dict[str, Any]:
    async with _database(base) as db:
        await upgrade(db)
        c = _container(db)
        await _log_statements(c, str(make_url(db).database))
        u = make_url(db)
        dsn = u.set(drivername="postgresql").render_as_string(False)
        port = _free_port()
        argv = [sys.executable, "-m", "scheduler.entrypoints.cli", "serve", "--role", "worker"]
        argv += ["--host", "127.0.0.1", "--port", str(port)]
        proc = subprocess.Popen(argv, cwd=ROOT, env=_worker_env(db, bootstrap))
        spy: subprocess.Popen[bytes] | None = None
        try:
            async with aiohttp.ClientSession() as http:
                await _wait_ready(http, f"http://127.0.0.1:{port}/readyz", proc)
            due = _next_minute(utc_now() + timedelta(seconds=BURST_LEAD_SECONDS))
            # One occurrence in the measured window: the due instant's minute of the year.
            cron = f"{due.minute} {due.hour} {due.day} {due.month} *"

            async def fill() -> None:
                rows = _schedule_rows(c, urls, n, next_run_at=due, cron=cron, ulid_ids=True)
                async with c.engine.begin() as conn:
                    for i in range(0, n, 2000):
                        await conn.execute(sa.insert(schedules), rows[i : i + 2000])

            arrivals = urls[0].rsplit("/", 1)[0] + "/_arrivals"
            planned = f"SELECT count(*) = {n} FROM runs"

            def profile() -> None:  # the burst only: from the due instant to the last run
                nonlocal spy
                spy = _py_spy(proc.pid)

            got = await _measure(
                proc, dsn, str(u.database), fill, OPEN_RUNS, arrivals, due, n, planned, profile
            )
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
                spy = None
            async with c.engine.connect() as conn:
                planned = (
                    await conn.execute(
                        sa.select(sa.func.count(), sa.func.min(runs.c.created_at)).where(
                            runs.c.trigger == "schedule"
                        )
                    )
                ).one()
                events = await conn.scalar(sa.text("SELECT count(*) FROM outbox"))
                unsent = await conn.scalar(
                    sa.text("SELECT count(*) FROM outbox WHERE sent_at IS NULL")
                )
            if int(planned[0]) != n:
                raise RuntimeError(f"{planned[0]} runs planned for {n} occurrences")
            got["planned_lead_s"] = round((due - planned[1]).total_seconds(), 1)
            got["events"] = {"written": int(events or 0), "unsent_at_end": int(unsent or 0)}
            return got
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
            proc.terminate()
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            await c.aclose()


async def _pgqueuer(base: str, urls: list[str], n: int) -> dict[str, Any]:
    async with _database(base) as db:
        u = make_url(db)
        dsn = u.set(drivername="postgresql").render_as_string(False)
        await pgqueuer_baseline.install(dsn)
        argv = [sys.executable, "-m", "bench.pgqueuer_baseline", dsn, str(IN_FLIGHT)]
        env = {**os.environ, "BENCH_WEBHOOK_SECRET": SECRET}
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            assert proc.stdin is not None
            line = await asyncio.to_thread(proc.stdout.readline)
            if line.strip() != "ready":
                raise RuntimeError(f"pgqueuer worker said {line!r}")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            due = utc_now().replace(microsecond=0) + timedelta(seconds=BURST_LEAD_SECONDS)

            async def fill() -> None:
                await pgqueuer_baseline.enqueue_burst(dsn, urls, n, due)

            arrivals = urls[0].rsplit("/", 1)[0] + "/_arrivals"
            open_sql = pgqueuer_baseline.OPEN_JOBS
            got = await _measure(proc, dsn, str(u.database), fill, open_sql, arrivals, due, n)
            conn = await asyncpg.connect(dsn)
            try:
                succeeded = await conn.fetchval(pgqueuer_baseline.SUCCEEDED_JOBS)
            finally:
                await conn.close()
            if succeeded != n:
                raise RuntimeError(f"pgqueuer logged {succeeded} successful jobs of {n}")
            proc.stdin.write("stop\n")
            proc.stdin.flush()
            proc.wait(timeout=30)
            return got
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def _run(rounds: int, n: int) -> dict[str, Any]:
    base = os.environ.get("BENCH_POSTGRES_URL") or os.environ.get("TEST_POSTGRES_URL")
    if not base:
        return {"skipped": "needs BENCH_POSTGRES_URL or TEST_POSTGRES_URL (PostgreSQL)"}
    results: dict[str, list[dict[str, Any]]] = {"pgqueuer": [], "ours": []}
    async with _receivers(PORTS) as urls, _tansu() as broker:
        for r in range(rounds):
            order = ["pgqueuer", "ours"] if r % 2 == 0 else ["ours", "pgqueuer"]
            for side in order:
                if side == "ours":
                    results[side].append(await _ours(base, urls, broker.bootstrap, n))
                else:
                    results[side].append(await _pgqueuer(base, urls, n))
    out: dict[str, Any] = {
        "runs": n,
        "ports": PORTS,
        "in_flight": IN_FLIGHT,
        "rounds": rounds,
        "ours_process": "scheduler serve --role worker (production defaults, Kafka relay)",
    }
    for side, got in results.items():
        by_speed = sorted(got, key=lambda g: float(g["runs_per_s"]))
        out[side] = {"median": by_speed[len(by_speed) // 2], "rounds": got}
    ours, theirs = out["ours"]["median"], out["pgqueuer"]["median"]
    out["ratio"] = round(ours["runs_per_s"] / theirs["runs_per_s"], 2)
    pg_ours = ours["cpu_ms_per_delivery"]["postgres"]
    pg_theirs = theirs["cpu_ms_per_delivery"]["postgres"]
    if pg_ours is not None and pg_theirs:
        out["postgres_cpu_ratio"] = round(pg_ours / pg_theirs, 2)
    out["lag_p99_ratio"] = round(ours["lag_p99_s"] / max(theirs["lag_p99_s"], 1e-3), 2)
    return out


def run(quick: bool) -> dict[str, Any]:
    return asyncio.run(_run(rounds=1 if quick else 3, n=1_000 if quick else RUNS))


if __name__ == "__main__":
    given = int((sys.argv[1:] or ["3"])[0])
    print(json.dumps(asyncio.run(_run(rounds=given, n=RUNS)), indent=2))
