"""The `history` part of the `scale` benchmark: claim, settle and the run-history reads with a
small and a large run history (bench/scale_bench.py runs it).

- Three probe schedules of tenant `history-probe` (hourly, created through the API, so they have
  versions and a real sealed secret) with 31 days of history each (744 runs: mostly succeeded,
  every 50th failed after 3 attempts, every 40th skipped): the same in both measurements.
- Background history, seeded in SQL (one INSERT ... SELECT generate_series statement per 500,000
  runs, writing each run's delivery attempts in the same statement): runs of other tenants and
  schedules (50 per schedule, at most 100,000 schedules, one tenant per 100 schedules, up to
  1,000) spread over the last 90 days (the default retention), 2 % failed (3 attempts), 2.5 %
  skipped, 1 % manual; ids are ULIDs whose time part is the run's creation (as `new_id` makes
  them), so an id-range partitioning sees them where it would see real ones. Secondary indexes
  of runs and delivery_attempts are dropped before the seeding and built again after it from
  their own definitions (pg_indexes): a bulk load's usual way, minutes faster than updating 14
  indexes row by row; the rebuilt indexes are denser than a live table's.
- Two databases, `small` and `large` background runs (same shape: tenants and schedules; only
  the depth differs), each with its API process, measured in turn 3 times, the order
  alternating: the API's reads (a schedule's runs, the page after it, the tenant's runs, its
  failed runs, one run, the 31-day ledger's first page; median ms of 15 after 2 warm-ups), and
  claim and settle (3,000 due runs of the probe schedules through the dispatcher's own
  `RunLeases.acquire` and `.write` in this process, with an action performer that answers at
  once: the time spent in each, per run).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import aiohttp
import sqlalchemy as sa

from bench.dispatch_bench import _container
from scheduler.adapters.db.tables import delivery_attempts, runs, schedules
from scheduler.adapters.db.types import UTCDateTime
from scheduler.bootstrap import Container, utc_now
from scheduler.domain.run import AttemptOutcome, Run
from scheduler.entrypoints.workers.runtime import WorkerOptions, WorkerRuntime
from scheduler.service_layer.dispatch_service import DispatchSettings
from scheduler.service_layer.run_ports import ActionResult, DeliverySpec
from servicekit.data.ids import CROCKFORD, new_id

PROBE_TENANT = "history-probe"
PROBE_SCHEDULES = 3
PROBE_DAYS = 31
CLAIMED_RUNS = 3_000
READ_REPEATS = 15
READ_WARMUPS = 2
SEED_BATCH = 500_000
RETENTION_DAYS = 90
PROBE_OFFSET = 10**15  # generate_series values of the probe's runs: apart from the background's


def _ulid_time(instant_sql: str) -> str:
    """SQL for the 10 Crockford characters of a ULID's time part (48 bits of Unix ms)."""
    ms = f"(floor(extract(epoch FROM {instant_sql}) * 1000)::bigint)"
    return " || ".join(
        f"substr('{CROCKFORD}', ((({ms} >> {shift}) & 31)::int) + 1, 1)"
        for shift in range(45, -1, -5)
    )


def _seed_sql(tenant: str, schedule: str, trigger: str) -> sa.TextClause:
    """One batch of runs `g` in [:lo, :hi]: schedule `s` = (g - :base) % :schedules, occurrence
    `k` = (g - :base) / :schedules at :start + k * :step (plus up to 10 minutes by schedule when
    :spread is 1); the fragments are SQL of g, s and k (this module's constants only)."""
    created = "r.scheduled_for - interval '30 seconds'"
    failed = "r.status = 'failed'"
    return sa.text(
        f"""
WITH r AS (
  SELECT g, {tenant} AS tenant_id, {schedule} AS schedule_id, {trigger} AS trigger,
    CAST(:start AS timestamptz) + k * CAST(:step AS interval)
      + make_interval(secs => (s % 600) * CAST(:spread AS integer)) AS scheduled_for,
    CASE WHEN g % 50 = 7 THEN 'failed' WHEN g % 40 = 3 THEN 'skipped' ELSE 'succeeded' END
      AS status
  FROM (SELECT g, (g - CAST(:base AS bigint)) % :schedules AS s,
          (g - CAST(:base AS bigint)) / :schedules AS k
        FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) g) AS gs
), ins AS (
  INSERT INTO runs (id, tenant_id, schedule_id, scheduled_for, trigger, status, skip_reason,
    attempt_count, started_at, finished_at, payload, created_at, due_at, schedule_version,
    destination)
  SELECT 'run_' || {_ulid_time(created)} || lpad(r.g::text, 16, '0'), r.tenant_id,
    r.schedule_id, r.scheduled_for, r.trigger, r.status,
    CASE WHEN r.status = 'skipped' THEN 'misfire' END,
    CASE r.status WHEN 'failed' THEN 3 WHEN 'skipped' THEN 0 ELSE 1 END,
    CASE WHEN r.status <> 'skipped' THEN r.scheduled_for + interval '200 milliseconds' END,
    r.scheduled_for + CASE WHEN {failed} THEN interval '70 seconds' ELSE interval '1 second' END,
    '{{"bench": "history"}}', {created}, r.scheduled_for, 1, 'hooks.example.com:443'
  FROM r
  RETURNING id, status, attempt_count, started_at
)
INSERT INTO delivery_attempts (run_id, number, started_at, duration_ms, status_code, error_kind,
  error_message, response_excerpt)
SELECT ins.id, n, ins.started_at + (n - 1) * interval '30 seconds', 120,
  CASE WHEN ins.status = 'failed' THEN 503 ELSE 200 END,
  CASE WHEN ins.status = 'failed' THEN 'http_status' END,
  CASE WHEN ins.status = 'failed' THEN 'HTTP 503' END,
  CASE WHEN ins.status = 'failed' THEN 'unavailable' ELSE 'ok' END
FROM ins, generate_series(1, ins.attempt_count) AS n
"""
    ).bindparams(sa.bindparam("start", type_=UTCDateTime()))


BACKGROUND_SQL = _seed_sql(
    tenant="'tenant-' || lpad((s % CAST(:tenants AS bigint))::text, 4, '0')",
    schedule="'sch_H' || lpad(s::text, 25, '0')",
    trigger="CASE WHEN g % 100 = 11 THEN 'manual' ELSE 'schedule' END",
)


def _background_shape(total: int) -> tuple[int, int]:
    """(schedules, tenants) of a background of `total` runs."""
    n_schedules = max(100, min(100_000, total // 50))
    return n_schedules, max(10, min(1_000, n_schedules // 100))


async def _secondary_indexes(c: Container) -> list[tuple[str, str]]:
    async with c.engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT i.indexname, i.indexdef FROM pg_indexes i "
                "JOIN pg_index x ON x.indexrelid = to_regclass(i.schemaname || '.' || i.indexname)"
                " WHERE i.tablename IN ('runs', 'delivery_attempts') AND NOT x.indisprimary"
            )
        )
        return [(str(r[0]), str(r[1])) for r in rows]


async def seed_background(c: Container, lo: int, hi: int, total: int) -> dict[str, float]:
    """Background runs g in [lo, hi) of a background whose final size is `total` (its shape:
    schedules, tenants, the 90-day spread)."""
    n_schedules, tenants = _background_shape(total)
    cycles = -(-total // n_schedules)
    end = utc_now() - timedelta(hours=2)
    start = end - timedelta(days=RETENTION_DAYS)
    step = timedelta(days=RETENTION_DAYS) / cycles
    indexes = await _secondary_indexes(c)
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    async with c.engine.begin() as conn:
        for name, _ in indexes:
            await conn.execute(sa.text(f'DROP INDEX "{name}"'))
    for b in range(lo, hi, SEED_BATCH):
        async with c.engine.begin() as conn:
            await conn.execute(
                BACKGROUND_SQL,
                {
                    "lo": b,
                    "hi": min(b + SEED_BATCH, hi) - 1,
                    "base": 0,
                    "schedules": n_schedules,
                    "tenants": tenants,
                    "start": start,
                    "step": step,
                    "spread": 1,
                },
            )
    times["insert_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    async with c.engine.begin() as conn:
        await conn.execute(sa.text("SET LOCAL maintenance_work_mem = '512MB'"))
        for _, definition in indexes:
            await conn.execute(sa.text(definition))
    times["index_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    await _vacuum(c)
    times["vacuum_analyze_s"] = time.perf_counter() - t0
    return {k: round(v, 1) for k, v in times.items()}


async def _vacuum(c: Container) -> None:
    """What autovacuum would have done to a table that grew over months (visibility map for
    index-only scans, statistics for the planner)."""
    async with c.engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(sa.text("VACUUM ANALYZE runs, delivery_attempts"))


async def seed_probe(c: Container, schedule_ids: list[str], end: datetime) -> None:
    """The probe schedules' hourly runs over the 31 days before `end`."""
    start = end - timedelta(days=PROBE_DAYS)
    n = PROBE_DAYS * 24 * len(schedule_ids)
    ids = ", ".join(f"'{i}'" for i in schedule_ids)
    stmt = _seed_sql(
        tenant=f"'{PROBE_TENANT}'",
        schedule=f"(ARRAY[{ids}])[s + 1]",
        trigger="'schedule'",
    )
    async with c.engine.begin() as conn:
        await conn.execute(
            stmt,
            {
                "lo": PROBE_OFFSET,
                "hi": PROBE_OFFSET + n - 1,
                "base": PROBE_OFFSET,
                "schedules": len(schedule_ids),
                "start": start,
                "step": timedelta(hours=1),
                "spread": 0,
            },
        )


# ---- reads -----------------------------------------------------------------------------------


async def reads(
    base: str, headers: dict[str, str], schedule_id: str, end: datetime
) -> dict[str, float]:
    """Median ms of each history read of the probe tenant (`read_<name>_ms`)."""
    window = {"from": (end - timedelta(days=PROBE_DAYS)).isoformat(), "to": end.isoformat()}
    async with aiohttp.ClientSession(base_url=base, headers=headers) as http:
        first = await _get(http, f"/v1/schedules/{schedule_id}/runs", {"limit": "50"})
        run_id = first["items"][0]["id"]
        page2 = {"limit": "50", "cursor": first["next_cursor"]}
        paths: dict[str, tuple[str, dict[str, str]]] = {
            "schedule_runs": (f"/v1/schedules/{schedule_id}/runs", {"limit": "50"}),
            "schedule_runs_page_2": (f"/v1/schedules/{schedule_id}/runs", page2),
            "tenant_runs": ("/v1/schedules/-/runs", {"limit": "50"}),
            "tenant_failed_runs": ("/v1/schedules/-/runs", {"limit": "50", "status": "failed"}),
            "one_run": (f"/v1/schedules/{schedule_id}/runs/{run_id}", {}),
            "ledger_31_days": (f"/v1/schedules/{schedule_id}/ledger", window),
        }
        out: dict[str, list[float]] = {name: [] for name in paths}
        for i in range(READ_WARMUPS + READ_REPEATS):
            for name, (path, params) in paths.items():  # interleaved: noise hits all alike
                t0 = time.perf_counter()
                await _get(http, path, params)
                if i >= READ_WARMUPS:
                    out[name].append((time.perf_counter() - t0) * 1000)
    return {f"read_{name}_ms": round(statistics.median(v), 2) for name, v in out.items()}


async def _get(http: aiohttp.ClientSession, path: str, params: dict[str, str]) -> Any:
    async with http.get(path, params=params) as r:
        body = await r.json()
        if r.status != 200:
            raise RuntimeError(f"GET {path}: {r.status} {body}")
        return body


# ---- claim and settle ------------------------------------------------------------------------


class InstantPerformer:
    """A 200 at once: the claim and the settle around it are what is measured."""

    def __init__(self, concurrency_key: Callable[[DeliverySpec], str]) -> None:
        self.concurrency_key = concurrency_key

    async def perform(
        self, run: Run, spec: DeliverySpec, attempt_number: int, **_: Any
    ) -> ActionResult:
        return ActionResult(AttemptOutcome(ok=True, started_at=utc_now(), duration_ms=1))


class Timed:
    """Wraps an async method: total seconds and items over the calls that did some work."""

    def __init__(self, method: Any, count: Callable[[Any, Any], int]) -> None:
        self.method = method
        self.count = count
        self.seconds = 0.0
        self.items = 0
        self.calls = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        result = await self.method(*args, **kwargs)
        n = self.count([*args, *kwargs.values()], result)
        if n:
            self.seconds += time.perf_counter() - t0
            self.items += n
            self.calls += 1
        return result

    def ms_per_item(self) -> float:
        return round(self.seconds * 1000 / max(self.items, 1), 4)


async def claim_and_settle(c: Container, schedule_ids: list[str], n: int) -> dict[str, Any]:
    now = utc_now()
    rows = [
        {
            "id": new_id("run", at=now),
            "tenant_id": PROBE_TENANT,
            "schedule_id": schedule_ids[i % len(schedule_ids)],
            "scheduled_for": now - timedelta(milliseconds=i),
            "trigger": "schedule",
            "status": "pending",
            "attempt_count": 0,
            "next_attempt_at": now - timedelta(milliseconds=i),
            "created_at": now,
            "due_at": now - timedelta(milliseconds=i),
            "schedule_version": 1,
        }
        for i in range(n)
    ]
    async with c.engine.begin() as conn:
        await conn.execute(sa.insert(runs), rows)
    runtime = WorkerRuntime(
        c,
        options=WorkerOptions(
            dispatch=DispatchSettings(concurrency=128, per_key_limit=128), planner=False
        ),
    )
    leases = runtime.dispatcher.leases
    runtime.dispatcher.performer = InstantPerformer(leases.concurrency_key)
    acquire = Timed(leases.acquire, lambda args, result: len(result))
    write = Timed(leases.write, lambda args, result: len(args[0]))
    leases.acquire = acquire  # type: ignore[method-assign]
    leases.write = write  # type: ignore[method-assign]
    task = asyncio.create_task(runtime.run())
    deadline = time.monotonic() + 300
    while write.items < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await runtime.stop(5)
    await task
    ids = [r["id"] for r in rows]
    async with c.engine.begin() as conn:
        done = (
            await conn.execute(
                sa.select(sa.func.count())
                .select_from(runs)
                .where(runs.c.id.in_(ids), runs.c.status == "succeeded")
            )
        ).scalar_one()
        # Gone again, so the large measurement starts from the same probe history.
        await conn.execute(sa.delete(delivery_attempts).where(delivery_attempts.c.run_id.in_(ids)))
        await conn.execute(sa.delete(runs).where(runs.c.id.in_(ids)))
    if done != n:
        raise RuntimeError(f"{done} of {n} claimed runs succeeded")
    return {"claim_ms_per_run": acquire.ms_per_item(), "settle_ms_per_run": write.ms_per_item()}


# ---- the part --------------------------------------------------------------------------------


@dataclass
class Side:
    """One history size: its database (a container for the in-process dispatcher), its API
    process's URL, the probe schedules, how long its seeding took."""

    container: Container
    api: str
    schedule_ids: list[str]
    seeding: dict[str, float]
    size: int


async def _probe_schedules(api: str, headers: dict[str, str], target_url: str) -> None:
    defs = [
        {
            "key": f"probe/{i}",
            "name": f"probe {i}",
            "cron": "0 * * * *",
            "timezone": "UTC",
            "target": {"url": target_url},
            # Every claimed run is attempted even when a loaded machine claims it late (the
            # default, fire_once, would skip all but the latest of a schedule's late runs).
            "misfire_policy": "fire_all",
        }
        for i in range(PROBE_SCHEDULES)
    ]
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.post(api + "/v1/schedules/apply", json={"schedules": defs}) as r,
    ):
        if r.status != 200:
            raise RuntimeError(f"apply: {r.status} {await r.text()}")


async def _side(
    db: str, api: str, size: int, shape_of: int, end: datetime, headers: dict[str, str], url: str
) -> Side:
    await _probe_schedules(api, headers, url)
    c = _container(db)
    async with c.engine.connect() as conn:
        ids = sorted(
            (
                await conn.execute(
                    sa.select(schedules.c.id).where(schedules.c.tenant_id == PROBE_TENANT)
                )
            ).scalars()
        )
    await seed_probe(c, ids, end)
    seeding = await seed_background(c, 0, size, shape_of)
    print(f"bench scale: history {size:,} seeded {seeding}", file=sys.stderr)
    return Side(c, api, ids, seeding, size)


async def measure(
    sides: dict[str, tuple[str, str, int]],
    target_url: str,
    bearer: Callable[[str], dict[str, str]],
    rounds: int,
) -> dict[str, Any]:
    """`sides`: label -> (database URL, API base URL, background runs), `small` and `large`.
    Both are seeded, then measured in turn `rounds` times (the order alternating, so the
    machine's noise falls on both); each figure is the median of its rounds."""
    headers = bearer(PROBE_TENANT)
    end = utc_now().replace(minute=0, second=0, microsecond=0)
    large = max(size for _, _, size in sides.values())
    built: dict[str, Side] = {}
    try:
        for label, (db, api, size) in sides.items():
            built[label] = await _side(db, api, size, large, end, headers, target_url)
        got: dict[str, list[dict[str, Any]]] = {label: [] for label in built}
        labels = list(built)
        for r in range(rounds):
            for label in labels[r % 2 :] + labels[: r % 2]:
                side = built[label]
                got[label].append(
                    {
                        **await reads(side.api, headers, side.schedule_ids[0], end),
                        **await claim_and_settle(side.container, side.schedule_ids, CLAIMED_RUNS),
                    }
                )
        out: dict[str, Any] = {
            "probe_runs": PROBE_DAYS * 24 * PROBE_SCHEDULES,
            "rounds": rounds,
            "background_shape": dict(
                zip(("schedules", "tenants"), _background_shape(large), strict=True)
            ),
        }
        for label, side in built.items():
            out[label] = {
                "background_runs": side.size,
                "seeding_s": side.seeding,
                "table_mib": await _table_mib(side.container),
                "median_ms": {k: _median(got[label], k) for k in got[label][0]},
            }
        small_m, large_m = out["small"]["median_ms"], out["large"]["median_ms"]
        out["ratios"] = {k: round(large_m[k] / small_m[k], 2) for k in small_m}
        return out
    finally:
        for side in built.values():
            await side.container.aclose()


def _median(rounds: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(float(r[key]) for r in rounds), 4)


async def _table_mib(c: Container) -> dict[str, int]:
    async with c.engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT relname, pg_total_relation_size(oid) FROM pg_class "
                "WHERE relname IN ('runs', 'delivery_attempts')"
            )
        )
        return {str(r[0]): int(r[1]) // 2**20 for r in rows}
