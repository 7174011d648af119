"""`POST /v1/schedules/apply` against a `scheduler serve --role api` process on PostgreSQL:

- `apply`: one apply of 10,000 definitions (quick: 500): wall time, the API process's peak RSS
  during it (VmHWM, reset before it through /proc/<pid>/clear_refs), rows inserted/updated/
  deleted in `schedules`, `outbox` and `schedule_versions` (pg_stat_user_tables) and events written;
- `reapply`: the same set again: wall time, rows written (0 expected) and events (0 expected);
- `baseline`: the same 10,000 created with one `POST /v1/schedules/` each, 8 at a time over
  keep-alive connections, by another tenant of the same process: wall time and peak RSS.

The tenants' `max_schedules` comes from SCHEDULER_DEFAULT_MAX_SCHEDULES (no entitlements event).
A fresh database on BENCH_POSTGRES_URL or TEST_POSTGRES_URL; without one, nothing is measured.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from sqlalchemy.engine import make_url

from authclient import mint_token
from bench.cpu_meter import peak_rss_mib
from bench.dispatch_bench import _databases
from scheduler.adapters.db.migrate import upgrade
from tests.support.processes import ServiceProcess

AUTH_KEY = "bench-apply-key-" + "x" * 40
SECRET_KEY = base64.urlsafe_b64encode(b"b" * 32).decode()
SCOPES = ("schedules:read", "schedules:write")
BASELINE_CONCURRENCY = 8
TABLES = ("schedules", "outbox", "schedule_versions")
# PostgreSQL (15+) flushes an idle backend's table counters within 10 s (PGSTAT_IDLE_INTERVAL).
STATS_SETTLE_SECONDS = 11.0
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=600)


def definition(i: int) -> dict[str, Any]:
    """An ordinary webhook definition (about 250 bytes of JSON)."""
    return {
        "key": f"bench/job-{i:05d}",
        "name": f"job {i}",
        "cron": f"{i % 60} {i % 24} * * *",
        "timezone": "Europe/Berlin",
        "target": {"url": "https://hooks.example.com/run", "headers": {"X-Job": str(i)}},
        "payload": {"job": i},
        "labels": {"team": "bench", "tier": str(i % 3)},
    }


def _bearer(tenant: str) -> dict[str, str]:
    token = mint_token(AUTH_KEY, tenant_id=tenant, scopes=SCOPES, ttl_seconds=3600)
    return {"Authorization": f"Bearer {token}"}


def _reset_peak(pid: int) -> None:
    """Start the VmHWM high-water mark again from the current RSS (Linux >= 4.0)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


async def _writes(dsn: str) -> dict[str, int]:
    """Rows inserted, updated and deleted so far in TABLES, and the outbox's row count."""
    await asyncio.sleep(STATS_SETTLE_SECONDS)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = await conn.fetch(
            "SELECT n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables "
            "WHERE relname = ANY($1::text[])",
            list(TABLES),
        )
        events = await conn.fetchval("SELECT count(*) FROM outbox")
    finally:
        await conn.close()
    return {
        "inserted": sum(r[0] for r in rows),
        "updated": sum(r[1] for r in rows),
        "deleted": sum(r[2] for r in rows),
        "events": int(events),
    }


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in before}


async def _apply(
    http: aiohttp.ClientSession, base: str, tenant: str, defs: list[dict[str, Any]]
) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    async with http.post(
        base + "/v1/schedules/apply", json={"schedules": defs}, headers=_bearer(tenant)
    ) as r:
        body = await r.json()
        assert r.status == 200, body
    return time.perf_counter() - started, body


async def _one_at_a_time(
    http: aiohttp.ClientSession, base: str, tenant: str, defs: list[dict[str, Any]]
) -> float:
    queue = list(reversed(defs))
    headers = _bearer(tenant)

    async def worker() -> None:
        while queue:
            body = queue.pop()
            async with http.post(base + "/v1/schedules/", json=body, headers=headers) as r:
                assert r.status == 201, await r.text()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(BASELINE_CONCURRENCY)))
    return time.perf_counter() - started


async def _measure(db: str, n: int, workdir: Path) -> dict[str, Any]:
    await upgrade(db)
    dsn = make_url(db).set(drivername="postgresql").render_as_string(False)
    api = ServiceProcess(
        "scheduler.entrypoints.cli",
        workdir,
        args=("serve", "--role", "api", "--port", "{port}"),
        env={
            "SCHEDULER_DATABASE_URL": db,
            "SCHEDULER_SECRET_KEY": SECRET_KEY,
            "AUTH_HS256_KEY": AUTH_KEY,
            "SCHEDULER_DEFAULT_MAX_SCHEDULES": str(2 * n),
        },
        name="scheduler-api",
        strip_env_prefixes=("SCHEDULER_", "NOTIFICATION_", "AUTH_", "KAFKA_", "EMBEDDED_"),
    )
    defs = [definition(i) for i in range(n)]
    report: dict[str, Any] = {
        "definitions": n,
        "body_bytes": len(json.dumps({"schedules": defs}).encode()),
    }
    await api.start()
    try:
        assert api.proc is not None
        pid = api.proc.pid
        report["rss_idle_mib"] = peak_rss_mib(pid)
        connector = aiohttp.TCPConnector(limit=BASELINE_CONCURRENCY)
        async with aiohttp.ClientSession(connector=connector, timeout=HTTP_TIMEOUT) as http:
            before = await _writes(dsn)
            _reset_peak(pid)
            seconds, body = await _apply(http, api.base_url, "bench-apply", defs)
            assert len(body["created"]) == n, body
            after = await _writes(dsn)
            report["apply"] = {
                "seconds": round(seconds, 2),
                "peak_rss_mib": peak_rss_mib(pid),
                "rows": _delta(before, after),
            }
            _reset_peak(pid)
            seconds, body = await _apply(http, api.base_url, "bench-apply", defs)
            assert body["unchanged"] == n, body
            again = await _writes(dsn)
            report["reapply"] = {
                "seconds": round(seconds, 2),
                "peak_rss_mib": peak_rss_mib(pid),
                "rows": _delta(after, again),
            }
            _reset_peak(pid)
            seconds = await _one_at_a_time(http, api.base_url, "bench-baseline", defs)
            report["baseline_one_post_each"] = {
                "seconds": round(seconds, 2),
                "concurrency": BASELINE_CONCURRENCY,
                "peak_rss_mib": peak_rss_mib(pid),
                "rows": _delta(again, await _writes(dsn)),
            }
        report["apply_vs_baseline_speedup"] = round(
            report["baseline_one_post_each"]["seconds"] / report["apply"]["seconds"], 1
        )
    finally:
        await api.aclose()
    return report


async def _run(quick: bool) -> dict[str, Any]:
    if not (os.environ.get("BENCH_POSTGRES_URL") or os.environ.get("TEST_POSTGRES_URL")):
        return {"skipped": "BENCH_POSTGRES_URL / TEST_POSTGRES_URL not set"}
    with tempfile.TemporaryDirectory() as tmp:
        async with _databases() as dbs:
            return await _measure(dict(dbs)["postgres"], 500 if quick else 10_000, Path(tmp))


def run(quick: bool) -> dict[str, Any]:
    return asyncio.run(_run(quick))


if __name__ == "__main__":
    print(json.dumps(run("--quick" in sys.argv), indent=2))
