"""The ledger's cost (DESIGN §7b: a 31-day window of `* * * * *`, 44,640 occurrences, pages in
<= 1 s per page of 1,000 on PostgreSQL): one schedule with a run per minute of the window, read
through the API over ASGI (`GET /v1/schedules/{id}/ledger`, limit 1,000) page after page.
Reports the first page (it also carries the window's summary and other runs) and the later pages
(median and max), in milliseconds. Needs BENCH_POSTGRES_URL or TEST_POSTGRES_URL for PostgreSQL;
SQLite is measured too.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import sqlalchemy as sa
from asgi_lifespan import LifespanManager

from authclient import mint_token
from bench.dispatch_bench import _container, _databases
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import runs, schedules
from scheduler.bootstrap import Container
from scheduler.domain.definition import ScheduleDefinition
from scheduler.domain.tenant import Entitlements
from scheduler.entrypoints.api.app import app_from_container
from scheduler.service_layer import schedules as schedule_svc
from tests.scheduler.definitions import definition

DAYS = 31
TENANT = "bench-ledger"
INSERT_BATCH = 5_000


async def _seed(c: Container, start: datetime, minutes: int) -> str:
    spec: ScheduleDefinition = definition(name="ledger", cron="* * * * *", timezone="UTC")
    created = await schedule_svc.create_schedule(
        c.uow_factory(),
        spec,
        tenant_id=TENANT,
        clock=lambda: start - timedelta(hours=1),
        new_secret=c.new_secret,
        limits=Entitlements(max_schedules=10, min_interval_seconds=60),
    )
    sid = created.schedule.id
    rows = [
        {
            "id": f"run_L{i:024d}",
            "tenant_id": TENANT,
            "schedule_id": sid,
            "scheduled_for": start + timedelta(minutes=i),
            "trigger": "schedule",
            "status": "skipped" if i % 97 == 0 else "succeeded",
            "skip_reason": "misfire" if i % 97 == 0 else None,
            "attempt_count": 1,
            "created_at": start + timedelta(minutes=i),
            "schedule_version": 1,
        }
        for i in range(minutes)
        if i % 1000 != 500  # a few missing ones, so the summary has them to count
    ]
    async with c.engine.begin() as conn:
        # The planner is past the window: an occurrence there without a run is missing.
        await conn.execute(sa.update(schedules).values(next_run_at=start + timedelta(days=40)))
        for i in range(0, len(rows), INSERT_BATCH):
            await conn.execute(sa.insert(runs), rows[i : i + INSERT_BATCH])
        if conn.dialect.name == "postgresql":
            await conn.execute(sa.text("ANALYZE runs"))
    return sid


async def _measure(url: str, quick: bool) -> dict[str, Any]:
    await upgrade(url)
    c = _container(url)
    days = 3 if quick else DAYS
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    start = end - timedelta(days=days)
    try:
        sid = await _seed(c, start, days * 1440)
        token = mint_token("x" * 40, tenant_id=TENANT, scopes=("schedules:read",))
        headers = {"Authorization": f"Bearer {token}"}
        params: dict[str, Any] = {"from": start.isoformat(), "to": end.isoformat()}
        app = app_from_container(c)
        timings, items, missing = [], 0, None
        async with LifespanManager(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://b") as client:
                cursor = None
                for _ in range(200):
                    t0 = time.perf_counter()
                    r = await client.get(
                        f"/v1/schedules/{sid}/ledger",
                        params={**params, **({"cursor": cursor} if cursor else {})},
                        headers=headers,
                    )
                    timings.append((time.perf_counter() - t0) * 1000)
                    assert r.status_code == 200, r.text
                    body = r.json()
                    items += len(body["items"])
                    if body["summary"] is not None:
                        missing = body["summary"]["outcomes"]["missing"]
                    cursor = body["next_cursor"]
                    if not cursor:
                        break
        later = timings[1:] or [0.0]
        return {
            "occurrences": items,
            "pages": len(timings),
            "missing_in_summary": missing,
            "first_page_ms": round(timings[0], 1),
            "later_pages_median_ms": round(statistics.median(later), 1),
            "later_pages_max_ms": round(max(later), 1),
        }
    finally:
        await c.aclose()


async def _run(quick: bool) -> dict[str, Any]:
    out = {}
    async with _databases() as dbs:
        for name, url in dbs:
            out[name] = await _measure(url, quick)
    return out


def run(quick: bool = False) -> dict[str, Any]:
    return asyncio.run(_run(quick))


if __name__ == "__main__":
    json.dump(run("--quick" in sys.argv), sys.stdout, indent=2)
