"""Planning pass cost vs stored schedules (DESIGN §10 "scale of planning"): one pass that
plans 1,000 due schedules among 10,000 stored, then among 1,000,000 (quick: 200,000). The ratio
must stay near 1: the due query walks the partial index `ix_schedules_due`, never the table.
Then one-shots: a pass over 1,000 due one-shot (`run_at`) schedules, which it plans and completes,
beside the 1,000 crons' pass (`one_shot_ratio`: how much dearer completing them makes it).
PostgreSQL when BENCH_POSTGRES_URL or TEST_POSTGRES_URL is set, and SQLite.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from bench.dispatch_bench import _add_schedules, _container, _databases, _reset, _schedule_rows
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import runs, schedules
from scheduler.adapters.db.types import UTCDateTime
from scheduler.bootstrap import Container, utc_now
from scheduler.service_layer.planning_service import PlanningSettings, plan_due

DUE = 1_000
REPEATS = 3

_COLUMNS = (
    "tenant_id, name, cron, timezone, action, target, payload, retry_policy, misfire_policy, "
    "overlap_policy, breaker, state, paused_reason, created_at, updated_at, deleted_at, version, "
    "consecutive_failures, secret_ciphertext"
)


async def _grow(c: Container, template: str, count: int, start: int) -> None:
    """Clone `count` not-due schedules from a template row in SQL (fast at a million rows)."""
    future = utc_now() + timedelta(days=30)
    pg = c.engine.dialect.name == "postgresql"
    if pg:
        series = "generate_series(CAST(:start AS integer), CAST(:stop AS integer)) AS g(x)"
        ident = "'sch_X' || lpad(x::text, 25, '0')"
        prefix = ""
    else:
        series = "g"
        ident = "'sch_X' || printf('%025d', x)"
        prefix = (
            "WITH RECURSIVE g(x) AS (SELECT :start UNION ALL SELECT x + 1 FROM g WHERE x < :stop) "
        )
    stmt = sa.text(
        f"INSERT INTO schedules (id, next_run_at, {_COLUMNS}) {prefix}"
        f"SELECT {ident}, :future, {_COLUMNS} FROM schedules, {series} WHERE id = :template"
    ).bindparams(sa.bindparam("future", type_=UTCDateTime()))
    step = 200_000
    for lo in range(start, start + count, step):
        hi = min(lo + step, start + count) - 1
        async with c.engine.begin() as conn:
            await conn.execute(
                stmt, {"start": lo, "stop": hi, "future": future, "template": template}
            )
    if pg:
        async with c.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(sa.text("ANALYZE schedules"))
    else:
        async with c.engine.begin() as conn:
            await conn.execute(sa.text("ANALYZE"))


async def _pass_cost(c: Container, due_ids: list[str]) -> float:
    settings = PlanningSettings(lookahead=timedelta(seconds=1), batch=DUE)
    costs = []
    for _ in range(REPEATS):
        now = utc_now()
        async with c.engine.begin() as conn:
            await conn.execute(sa.delete(runs))
            await conn.execute(
                sa.update(schedules)
                .where(schedules.c.id.in_(due_ids))
                .values(next_run_at=now - timedelta(seconds=1))
            )
        started = time.perf_counter()
        report = await plan_due(c.uow_factory, now=now, settings=settings)
        costs.append(time.perf_counter() - started)
        assert report.schedules == DUE, report
    return statistics.median(costs)


async def _one_shot_cost(c: Container) -> float:
    """One pass over DUE one-shots due a second ago (fresh ones each repeat): planned and
    completed."""
    settings = PlanningSettings(lookahead=timedelta(seconds=1), batch=DUE)
    costs = []
    for repeat in range(REPEATS):
        now = utc_now()
        due = now - timedelta(seconds=1)
        rows = _schedule_rows(
            c, ["http://127.0.0.1:9/hook"], DUE, run_at=due, id_prefix=f"O{repeat}"
        )
        async with c.engine.begin() as conn:
            await conn.execute(sa.insert(schedules), rows)
        started = time.perf_counter()
        report = await plan_due(c.uow_factory, now=now, settings=settings)
        costs.append(time.perf_counter() - started)
        assert report.schedules == DUE, report
    return statistics.median(costs)


async def _run(quick: bool) -> dict[str, Any]:
    large = 200_000 if quick else 1_000_000
    out: dict[str, Any] = {"due": DUE, "large": large}
    async with _databases() as dbs:
        for backend, db in dbs:
            await upgrade(db)
            c = _container(db)
            try:
                await _reset(c)
                due_ids = await _add_schedules(c, "http://127.0.0.1:9/hook", DUE, utc_now())
                await _grow(c, due_ids[0], 10_000 - DUE, 1)
                small = await _pass_cost(c, due_ids)
                one_shots = await _one_shot_cost(c)
                await _grow(c, due_ids[0], large - 10_000, 10_000)
                big = await _pass_cost(c, due_ids)
                out[backend] = {
                    "pass_s_10k": round(small, 4),
                    f"pass_s_{large // 1000}k": round(big, 4),
                    "ratio": round(big / small, 2),
                    "one_shot_pass_s": round(one_shots, 4),
                    "one_shot_ratio": round(one_shots / small, 2),
                }
            finally:
                await c.aclose()
    return out


def run(quick: bool) -> dict[str, Any]:
    return asyncio.run(_run(quick))


if __name__ == "__main__":
    import json

    print(json.dumps(run("--quick" in sys.argv), indent=2))
