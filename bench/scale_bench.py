"""History at scale and `--processes` (DESIGN §7b, issue 28): PostgreSQL only.

`make bench BENCH_ARGS="scale [--herd N] [--rounds R] [--kind cron|run_at] [--stored N]
[--history N] [--only P,...]"` (the benchmark's name first; `--quick` for a smoke run). Parts
(`--only herd,planning,history`):

- `herd`: N schedules (default 100,000; quick 10,000) all due at one instant, daily crons at the
  due minute (`--kind cron`, the default) or one-shots (`--kind run_at`), created with
  `POST /v1/schedules/apply` (1,000 definitions per call, one tenant per call) through a
  `scheduler serve --role api` process, planned and delivered by ONE
  `scheduler serve --role worker --grace 30 --processes 2` process started as deploy/ starts it
  (production settings: 60 s look-ahead, 64 in flight per process, 10 per tenant destination) to
  loopback receivers (bench/scale_receiver.py). Per round: drain time (due instant to the last
  run settled in the database), runs/s, p50/p99/max lag (first arrival - scheduled time), how
  long before the due instant the last run was planned, exactly one run and one attempt per
  schedule (database) and one arrival per X-Webhook-Id (receivers); CPU ms per run of the worker
  processes (parent + children) and of the database's PostgreSQL backends (bench/cpu_meter.py),
  WAL bytes per run (pg_current_wal_lsn marks, this database's share read back with
  pg_walinspect: `WalMeter`), each in the planning window (apply done to due) and the
  delivery window (due to drained); the API's CPU per applied definition; peak RSS (VmHWM) of the
  API, the worker parent and each child. Median round of R by drain time (default 3; quick 1),
  every round's figures beside it. One more round of 10,000 (quick 2,000) for peak RSS against
  the herd size.
- `planning`: one planning pass (`plan_due`, the planner's own code) of 1,000 due schedules
  among 10,000 stored, then among `--stored` (1,000,000; quick 100,000) cloned in SQL from a
  schedule the API created (every column, so the planner reads them as real); then a herd round
  with them stored: is the herd still planned before it is due?
- `history`: claim and settle (the dispatcher's own `acquire` and `write`, timed per run) and
  the run-history reads through the API (a schedule's runs, the tenant's runs, its failed runs,
  one run, the 31-day ledger) with `--history` runs (5,000,000; quick 200,000; the issue's
  figure is 50,000,000) stored versus `--history-small` (5,000), two databases seeded in SQL and
  measured in turn (bench/scale_history.py).

Every ratio is of two figures from the same run (this machine is shared and noisy). Each part
uses fresh databases on BENCH_POSTGRES_URL or TEST_POSTGRES_URL, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from authclient import mint_token
from bench import scale_history
from bench.cpu_meter import PostgresCpu, peak_rss_mib, process_cpu_seconds
from bench.dispatch_bench import KEY, LAG_CRON, _container, _databases, _free_port, _pctl
from bench.planning_bench import _pass_cost
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import UNFINISHED_LIVE_SQL, schedules
from scheduler.adapters.db.types import UTCDateTime
from scheduler.bootstrap import Container, utc_now
from tests.support.processes import ServiceProcess, wait_until

ROOT = Path(__file__).resolve().parent.parent
AUTH_KEY = "bench-scale-key-" + "x" * 40
SECRET_KEY = KEY
"""dispatch_bench's container key: the history part's in-process dispatcher opens the secrets the
API sealed."""
SCOPES = ("schedules:read", "schedules:write")
APPLY_BATCH = 1_000
"""Definitions per apply call, one tenant each: a herd of N is N / 1,000 tenants."""
PLAN_AHEAD_SECONDS = 70.0
"""The due instant is this long after the last apply is expected to finish: more than the 60 s
look-ahead, so the whole herd enters the look-ahead after it exists, as it would in production."""
APPLY_MARGIN = 1.5
"""The apply time is estimated from a warm-up call; the estimate is stretched by this much."""
DRAIN_DEADLINE_SECONDS = 300.0
START_SECONDS = 90.0  # two worker children start on a loaded 2-core machine
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=600)
STRIP_ENV = ("SCHEDULER_", "NOTIFICATION_", "AUTH_", "KAFKA_", "EMBEDDED_", "WEBHOOK_")
PARTS = ("herd", "planning", "history")


@dataclass(frozen=True)
class Options:
    herd: int
    small_herd: int
    rounds: int
    processes: int
    stored: int
    history: int
    history_small: int
    parts: tuple[str, ...]
    kind: str
    history_rounds: int


def parse_options(argv: Sequence[str], quick: bool) -> Options:
    p = argparse.ArgumentParser(prog="bench scale")
    p.add_argument("--herd", type=int, default=10_000 if quick else 100_000)
    p.add_argument("--small-herd", type=int, default=2_000 if quick else 10_000)
    p.add_argument("--rounds", type=int, default=1 if quick else 3)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--stored", type=int, default=100_000 if quick else 1_000_000)
    p.add_argument("--history", type=int, default=200_000 if quick else 5_000_000)
    p.add_argument("--history-small", type=int, default=5_000)
    p.add_argument("--only", default=",".join(PARTS), help="comma-separated parts")
    p.add_argument("--kind", choices=("cron", "run_at"), default="cron", help="the herd's timing")
    a = p.parse_args(list(argv))
    parts = tuple(x for x in a.only.split(",") if x)
    if set(parts) - set(PARTS) or a.rounds < 1 or a.herd < APPLY_BATCH:
        p.error(f"--only takes {PARTS}; --rounds >= 1; --herd >= {APPLY_BATCH}")
    return Options(
        a.herd,
        a.small_herd,
        a.rounds,
        a.processes,
        a.stored,
        a.history,
        a.history_small,
        parts,
        a.kind,
        1 if quick else 3,
    )


# ---- processes -------------------------------------------------------------------------------


def service_env(db: str) -> dict[str, str]:
    """What both services get: the database, keys, loopback targets allowed, and limits that a
    tenant with an entitlements event would have (the herd's tenants have none)."""
    return {
        "SCHEDULER_DATABASE_URL": db,
        "SCHEDULER_SECRET_KEY": SECRET_KEY,
        "AUTH_HS256_KEY": AUTH_KEY,
        "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
        "SCHEDULER_DEFAULT_MAX_SCHEDULES": "10000000",
        "SCHEDULER_DEFAULT_MAX_RUNS_PER_DAY": "10000000",
    }


def api_process(db: str, workdir: Path) -> ServiceProcess:
    return ServiceProcess(
        "scheduler.entrypoints.cli",
        workdir,
        args=("serve", "--host", "127.0.0.1", "--port", "{port}", "--role", "api"),
        env=service_env(db),
        name="scheduler-api",
        strip_env_prefixes=STRIP_ENV,
    )


def worker_process(db: str, workdir: Path, processes: int) -> ServiceProcess:
    """deploy/kubernetes/base/scheduler-worker.yaml's command, on loopback."""
    args = ("serve", "--host", "127.0.0.1", "--port", "{port}", "--role", "worker")
    return ServiceProcess(
        "scheduler.entrypoints.cli",
        workdir,
        args=(*args, "--grace", "30", "--processes", str(processes)),
        env=service_env(db),
        name="scheduler-worker",
        strip_env_prefixes=STRIP_ENV,
    )


def children_of(pid: int) -> list[int]:
    """Live processes whose parent is `pid` (the worker parent's children)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid = raw[raw.rindex(")") + 2 :].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.append(int(entry))
    return sorted(found)


@asynccontextmanager
async def receivers(count: int = 2) -> AsyncIterator[list[str]]:
    """One receiver process listening on `count` ports: the webhook URLs, one per port."""
    ports = [_free_port() for _ in range(count)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.scale_receiver", *map(str, ports)], cwd=ROOT
    )
    try:
        async with aiohttp.ClientSession() as s:

            async def up() -> bool:
                try:
                    async with s.get(f"http://127.0.0.1:{ports[0]}/_arrivals") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await wait_until(up, 20, "receiver up")
        yield [f"http://127.0.0.1:{p}/hook" for p in ports]
    finally:
        proc.terminate()
        proc.wait()


async def arrivals_of(url: str) -> dict[str, list[float]]:
    base = url.rsplit("/", 1)[0]
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as s, s.get(base + "/_arrivals") as r:
        got: dict[str, list[float]] = await r.json()
    return got


def bearer(tenant: str) -> dict[str, str]:
    token = mint_token(AUTH_KEY, tenant_id=tenant, scopes=SCOPES, ttl_seconds=7200)
    return {"Authorization": f"Bearer {token}"}


async def apply(
    http: aiohttp.ClientSession, base: str, tenant: str, defs: list[dict[str, Any]]
) -> dict[str, Any]:
    async with http.post(
        base + "/v1/schedules/apply", json={"schedules": defs}, headers=bearer(tenant)
    ) as r:
        body: dict[str, Any] = await r.json()
        if r.status != 200:
            raise RuntimeError(f"apply for {tenant}: {r.status} {body}")
    return body


def herd_definition(i: int, url: str, due: datetime, kind: str) -> dict[str, Any]:
    """`cron`: daily at the due minute (the classic herd, `0 9 * * *` of many tenants), whose
    next occurrence after this one is a day away; `run_at`: a one-shot at the due instant."""
    timing = (
        {"cron": f"{due.minute} {due.hour} * * *"}
        if kind == "cron"
        else {"run_at": due.isoformat()}
    )
    return {
        "key": f"herd/{i:06d}",
        "name": f"herd {i}",
        **timing,
        "timezone": "UTC",
        "target": {"url": url},
        "payload": {"i": i},
        "labels": {"bench": "scale"},
    }


def dsn_of(db: str) -> str:
    return make_url(db).set(drivername="postgresql").render_as_string(False)


class WalMeter:
    """WAL written between marks (pg_current_wal_lsn), server-wide and this database's own:
    WAL is one stream for the server, and other databases (other helpers' tests, a CREATE
    DATABASE copying its template) write into the same window. pg_walinspect reads the window's
    records back: ours are those touching a relation of this database, and every record of a
    transaction that did (its commit). A temporary physical slot holds the window's WAL until
    it is read (a checkpoint would recycle it otherwise)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn: asyncpg.Connection | None = None

    async def __aenter__(self) -> WalMeter:
        self.conn = await asyncpg.connect(self.dsn)
        await self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        slot = f"bench_scale_{os.getpid()}"
        await self.conn.execute(f"SELECT pg_create_physical_replication_slot('{slot}', true, true)")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.conn is not None
        await self.conn.close()  # the temporary slot goes with the session

    async def mark(self) -> str:
        assert self.conn is not None
        return str(await self.conn.fetchval("SELECT pg_current_wal_lsn()::text"))

    async def bytes_between(self, start: str, end: str) -> dict[str, int]:
        assert self.conn is not None
        row = await self.conn.fetchrow(
            """
WITH w AS (
  SELECT xid, record_length,
    coalesce(block_ref LIKE '%rel 1663/' || (SELECT oid FROM pg_database
      WHERE datname = current_database()) || '/%', false) AS mine
  FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)
), ours AS (SELECT DISTINCT xid FROM w WHERE mine AND xid <> 0)
SELECT coalesce(sum(record_length) FILTER (WHERE mine OR xid IN (SELECT xid FROM ours)), 0),
  coalesce(sum(record_length), 0)
FROM w""",
            start,
            end,
        )
        assert row is not None
        return {"own": int(row[0]), "server": int(row[1])}


# ---- one herd round --------------------------------------------------------------------------


async def herd_round(
    db: str, n: int, processes: int, workdir: Path, kind: str = "cron"
) -> dict[str, Any]:
    """One herd of `n` one-shot schedules, fresh API and worker processes (their VmHWM is this
    round's), in a database already migrated (it may hold other schedules: the planning part)."""
    dsn = dsn_of(db)
    database = str(make_url(db).database)
    async with receivers() as urls:
        api = api_process(db, workdir)
        worker = worker_process(db, workdir, processes)
        try:
            await api.start()
            await worker.start(timeout=START_SECONDS)
            await wait_until(
                lambda: _ready(worker), START_SECONDS, "worker processes ready", every=0.5
            )
            assert api.proc is not None
            assert worker.proc is not None
            children = children_of(worker.proc.pid)
            return await _herd(api, worker.proc.pid, children, urls, dsn, database, n, kind)
        finally:
            if worker.proc is not None and worker.proc.returncode is None:
                worker.terminate()  # SIGTERM: the parent stops its children
                await worker.wait(90)
            await api.aclose()


async def _ready(worker: ServiceProcess) -> bool:
    return await worker.status("/readyz") == 200


async def _herd(
    api: ServiceProcess,
    parent: int,
    children: list[int],
    urls: list[str],
    dsn: str,
    database: str,
    n: int,
    kind: str,
) -> dict[str, Any]:
    assert api.proc is not None
    tenants = n // APPLY_BATCH
    out: dict[str, Any] = {
        "runs": n,
        "kind": kind,
        "tenants": tenants,
        "worker_children": len(children),
    }
    async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http:
        # Warm-up (its schedules fire in a day, after the round): how long one call takes.
        started = time.perf_counter()
        later = utc_now() + timedelta(days=1)
        warm = [herd_definition(i, urls[0], later, "run_at") for i in range(APPLY_BATCH)]
        await apply(http, api.base_url, "scale-warmup", warm)
        per_call = time.perf_counter() - started
        ahead = APPLY_MARGIN * per_call * tenants + PLAN_AHEAD_SECONDS
        due = utc_now() + timedelta(seconds=ahead)
        # A whole minute for cron (its resolution); a whole second for run_at.
        due = (due + timedelta(minutes=1)).replace(second=0) if kind == "cron" else due
        due = due.replace(microsecond=0)
        cpu_api0 = process_cpu_seconds(api.proc.pid) or 0.0
        started = time.perf_counter()
        async with PostgresCpu(dsn, database) as pg_apply:
            for t in range(tenants):
                defs = [
                    herd_definition(i, urls[i % len(urls)], due, kind)
                    for i in range(t * APPLY_BATCH, (t + 1) * APPLY_BATCH)
                ]
                body = await apply(http, api.base_url, f"scale-{t:04d}", defs)
                if len(body["created"]) != APPLY_BATCH:
                    raise RuntimeError(f"apply created {len(body['created'])} of {APPLY_BATCH}")
        applied = utc_now()
        cpu_api = (process_cpu_seconds(api.proc.pid) or 0.0) - cpu_api0
        out["apply"] = {
            "seconds": round(time.perf_counter() - started, 1),
            "calls": tenants,
            "api_cpu_ms_per_definition": round(cpu_api * 1000 / n, 3),
            "postgres_cpu_ms_per_definition": _ms(pg_apply.seconds, n),
            "done_before_due_s": round((due - applied).total_seconds(), 1),
        }
    pids = [parent, *children]
    async with WalMeter(dsn) as wal:
        cpu0 = _cpu(pids)
        wal0 = await wal.mark()
        async with PostgresCpu(dsn, database) as pg_plan:
            await asyncio.sleep(max((due - utc_now()).total_seconds(), 0.0))
        cpu1 = _cpu(pids)
        wal1 = await wal.mark()
        async with PostgresCpu(dsn, database) as pg_run:
            deadline = time.monotonic() + DRAIN_DEADLINE_SECONDS
            while not await _drained(pg_run, n) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            drained = time.time()
        cpu2 = _cpu(pids)
        wal2 = await wal.mark()
        wal_plan = await wal.bytes_between(wal0, wal1)
        wal_run = await wal.bytes_between(wal1, wal2)
    drain_s = drained - due.timestamp()
    out.update(
        {
            "drain_s": round(drain_s, 2),
            "runs_per_s": round(n / drain_s, 1),
            **await _lags(urls[0], due, n),
            **await _exactly_once(dsn, n),
            "cpu_ms_per_run": {
                "planning": {
                    "worker": round((cpu1 - cpu0) * 1000 / n, 3),
                    "postgres": _ms(pg_plan.seconds, n),
                },
                "delivery": {
                    "worker": round((cpu2 - cpu1) * 1000 / n, 3),
                    "postgres": _ms(pg_run.seconds, n),
                },
            },
            "wal_bytes_per_run": {
                "planning": round(wal_plan["own"] / n),
                "delivery": round(wal_run["own"] / n),
                "server_planning": round(wal_plan["server"] / n),
                "server_delivery": round(wal_run["server"] / n),
            },
            "peak_rss_mib": {
                "api": peak_rss_mib(api.proc.pid),
                "worker_parent": peak_rss_mib(parent),
                "worker_children": [peak_rss_mib(c) for c in children],
            },
        }
    )
    return out


def _cpu(pids: list[int]) -> float:
    return sum(process_cpu_seconds(p) or 0.0 for p in pids)


def _ms(seconds: float | None, n: int) -> float | None:
    return None if seconds is None else round(seconds * 1000 / n, 3)


async def _drained(pg: PostgresCpu, n: int) -> bool:
    """No run unfinished (ix_runs_schedule_unfinished answers), and all n exist: a probe that
    costs the meter's connection only (not counted)."""
    if await pg.fetchval(f"SELECT EXISTS (SELECT 1 FROM runs WHERE {UNFINISHED_LIVE_SQL})"):
        return False
    done = await pg.fetchval("SELECT count(*) FROM runs WHERE trigger = 'schedule'")
    return int(str(done)) >= n


async def _lags(url: str, due: datetime, n: int) -> dict[str, Any]:
    arrivals = await arrivals_of(url)
    herd = {k: v for k, v in arrivals.items() if k}
    lags = sorted(times[0] - due.timestamp() for times in herd.values())
    return {
        "receiver_distinct_ids": len(herd),
        "receiver_repeated_ids": sum(1 for t in herd.values() if len(t) > 1),
        "lag_p50_s": _pctl(lags, 0.5) if lags else None,
        "lag_p99_s": _pctl(lags, 0.99) if lags else None,
        "lag_max_s": round(lags[-1], 3) if lags else None,
        "last_arrival_s": round(lags[-1], 3) if lags else None,
        "all_delivered": len(herd) == n,
    }


async def _exactly_once(dsn: str, n: int) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT count(*) AS runs, count(DISTINCT schedule_id) AS schedules, "
            "count(*) FILTER (WHERE status = 'succeeded') AS succeeded, "
            "extract(epoch FROM max(scheduled_for) - max(created_at)) AS planned_ahead "
            "FROM runs WHERE trigger = 'schedule'"
        )
        attempts = await conn.fetchrow(
            "SELECT count(*) AS attempts, count(DISTINCT run_id) AS runs FROM delivery_attempts"
        )
    finally:
        await conn.close()
    return {
        "db_runs": row["runs"],
        "db_schedules_with_a_run": row["schedules"],
        "db_succeeded": row["succeeded"],
        "db_attempts": attempts["attempts"],
        "db_runs_with_attempts": attempts["runs"],
        "exactly_once": row["runs"] == row["schedules"] == row["succeeded"] == n
        and attempts["attempts"] == attempts["runs"] == n,
        "last_planned_before_due_s": round(float(row["planned_ahead"] or 0), 1),
    }


@asynccontextmanager
async def fresh_database() -> AsyncIterator[str]:
    async with _databases() as dbs:
        db = dict(dbs)["postgres"]
        await upgrade(db)
        yield db


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    by_drain = sorted(rounds, key=lambda r: float(r["drain_s"]))
    return by_drain[len(by_drain) // 2]


# ---- parts -----------------------------------------------------------------------------------


async def herd_part(opts: Options, workdir: Path) -> dict[str, Any]:
    rounds = []
    for _ in range(opts.rounds):
        async with fresh_database() as db:
            rounds.append(await herd_round(db, opts.herd, opts.processes, workdir, opts.kind))
        print(f"bench scale: herd round {len(rounds)} done", file=sys.stderr)
    async with fresh_database() as db:
        small = await herd_round(db, opts.small_herd, opts.processes, workdir, opts.kind)
    best = median_round(rounds)
    keys = ("drain_s", "runs_per_s", "lag_p50_s", "lag_p99_s", "exactly_once")
    return {
        "processes": opts.processes,
        "median": best,
        "rounds": [{k: r[k] for k in keys} for r in rounds],
        "small": small,
        "peak_rss_ratio_herd_to_small": _rss_ratios(best, small),
    }


def _rss_ratios(big: dict[str, Any], small: dict[str, Any]) -> dict[str, Any]:
    b, s = big["peak_rss_mib"], small["peak_rss_mib"]

    def r(x: float | None, y: float | None) -> float | None:
        return None if x is None or not y else round(x / y, 2)

    return {
        "api": r(b["api"], s["api"]),
        "worker_parent": r(b["worker_parent"], s["worker_parent"]),
        "worker_children": [
            r(x, y) for x, y in zip(b["worker_children"], s["worker_children"], strict=False)
        ],
    }


async def clone_schedules(c: Container, template: str, count: int, start: int) -> float:
    """`count` copies of a schedule row in SQL, every column copied but the id, the tenant (one
    of 1,000), the key (none) and next_run_at (in 30 days: stored, not due). Their secret is the
    template's, sealed for its id: they must never be delivered. Seconds taken."""
    own = {"id", "tenant_id", "key", "next_run_at"}
    copied = [c.name for c in schedules.c if c.name not in own]
    cols = ", ".join(copied)
    stmt = sa.text(
        f"INSERT INTO schedules (id, tenant_id, key, next_run_at, {cols}) "
        f"SELECT 'sch_S' || lpad(x::text, 25, '0'), 'stored-' || (x % 1000), NULL, :future, "
        f"{cols} FROM schedules, generate_series(CAST(:lo AS integer), CAST(:hi AS integer)) x "
        "WHERE id = :template"
    ).bindparams(sa.bindparam("future", type_=UTCDateTime()))
    future = utc_now() + timedelta(days=30)
    started = time.perf_counter()
    step = 200_000
    for lo in range(start, start + count, step):
        hi = min(lo + step, start + count) - 1
        async with c.engine.begin() as conn:
            await conn.execute(stmt, {"lo": lo, "hi": hi, "future": future, "template": template})
    async with c.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(sa.text("VACUUM ANALYZE schedules"))
    return time.perf_counter() - started


async def planning_part(opts: Options, workdir: Path) -> dict[str, Any]:
    due_count = 1_000
    out: dict[str, Any] = {"due": due_count, "stored_small": 10_000, "stored_large": opts.stored}
    async with fresh_database() as db:
        api = api_process(db, workdir)
        await api.start()
        try:
            async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as http:
                # Yearly, so a pass plans one occurrence and leaves the next months away.
                defs = [
                    {
                        "key": f"plan/{i:04d}",
                        "name": f"plan {i}",
                        "cron": LAG_CRON,
                        "timezone": "UTC",
                        "target": {"url": "http://127.0.0.1:9/hook"},
                    }
                    for i in range(due_count)
                ]
                await apply(http, api.base_url, "plan-probe", defs)
        finally:
            await api.aclose()
        c = _container(db)
        try:
            async with c.engine.connect() as conn:
                ids = list(
                    (
                        await conn.execute(
                            sa.select(schedules.c.id).where(schedules.c.tenant_id == "plan-probe")
                        )
                    ).scalars()
                )
            seeded = await clone_schedules(c, ids[0], 10_000 - due_count, 1)
            small = await _pass_cost(c, ids)
            seeded += await clone_schedules(c, ids[0], opts.stored - 10_000, 10_000)
            big = await _pass_cost(c, ids)
            async with c.engine.begin() as conn:
                await conn.execute(sa.text("DELETE FROM runs"))  # the passes' runs: not the herd's
        finally:
            await c.aclose()
        out.update(
            {
                "seed_seconds": round(seeded, 1),
                "pass_s_small": round(small, 4),
                "pass_s_large": round(big, 4),
                "ratio": round(big / small, 2),
            }
        )
        print("bench scale: planning passes done", file=sys.stderr)
        herd = await herd_round(db, opts.herd, opts.processes, workdir, opts.kind)
        keys = (
            "runs",
            "drain_s",
            "runs_per_s",
            "lag_p50_s",
            "lag_p99_s",
            "last_planned_before_due_s",
            "exactly_once",
        )
        out["herd_among_stored"] = {k: herd[k] for k in keys}
    return out


async def history_part(opts: Options, workdir: Path) -> dict[str, Any]:
    async with fresh_database() as small, fresh_database() as large, receivers(1) as urls:
        apis = [api_process(small, workdir), api_process(large, workdir)]
        try:
            for api in apis:
                await api.start()
            sides = {
                "small": (small, apis[0].base_url, opts.history_small),
                "large": (large, apis[1].base_url, opts.history),
            }
            return await scale_history.measure(sides, urls[0], bearer, opts.history_rounds)
        finally:
            for api in apis:
                await api.aclose()


async def _run(opts: Options) -> dict[str, Any]:
    if not (os.environ.get("BENCH_POSTGRES_URL") or os.environ.get("TEST_POSTGRES_URL")):
        return {"skipped": "BENCH_POSTGRES_URL / TEST_POSTGRES_URL not set"}
    report: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "code": code_version(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        workdir = Path(tmp)
        if "herd" in opts.parts:
            report["herd"] = await herd_part(opts, workdir)
        if "planning" in opts.parts:
            report["planning"] = await planning_part(opts, workdir)
        if "history" in opts.parts:
            report["history"] = await history_part(opts, workdir)
    if report["code"] != code_version():
        report["code_changed_during_run"] = code_version()
    return report


def code_version() -> dict[str, Any]:
    """Which checkout's scheduler code this process and the services it starts import, and its
    commit: a shared virtualenv's editable install follows whatever that checkout holds, which
    may move while a 40-minute run is under way."""
    import scheduler

    where = Path(scheduler.__file__).resolve().parents[2]
    git = ["git", "-C", str(where)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--", "services", "pkg"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {"checkout": str(where), "commit": head.stdout.strip(), "dirty": bool(dirty.stdout)}


def run(quick: bool, argv: Sequence[str] = ()) -> dict[str, Any]:
    return asyncio.run(_run(parse_options(argv, quick)))


if __name__ == "__main__":
    print(json.dumps(run("--quick" in sys.argv, [a for a in sys.argv[1:] if a != "--quick"])))
