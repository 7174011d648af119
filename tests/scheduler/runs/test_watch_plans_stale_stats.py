"""The worker's periodic passes keep their index paths on tables a herd has just grown, before
autovacuum analyses them (EXPLAIN ANALYZE of the statements the repositories send, in a
transaction where the pass's own settings are in force). On the statistics of the tables as they
were before, PostgreSQL scanned all of `schedule_versions` (100,000 rows, ~150 ms) in each
ledger-watch batch and every run (83,500 rows, ~64 ms) in each completion-watchdog pass, many
times during a 100,000 herd (auto_explain of the scale bench)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.service_layer.ledger_watch import count_missing_once
from tests.scheduler.runs.conftest import ManualClock, add_schedule

HERD = 20_000
TABLES = ("schedules", "schedule_versions", "ledger_watermarks", "runs")


async def stale_statistics_then_a_herd(container: Container, schedule_id: str) -> None:
    """Statistics of the tables nearly empty, then a herd's rows the planner has not seen."""
    async with container.engine.begin() as conn:
        for table in TABLES:
            await conn.execute(sa.text(f"ANALYZE {table}"))
        await conn.execute(
            sa.text(
                "INSERT INTO schedule_versions (schedule_id, version, tenant_id, at, actor, "
                "source, state, definition, changes) "
                "SELECT 'sch_Z' || lpad(g::text, 25, '0'), 1, 'tenant-z', now(), 'x', 'api', "
                "'active', '{}', '[]' FROM generate_series(1, :n) AS g"
            ),
            {"n": HERD},
        )
        # Runs waiting for their completion call, none overdue but the one at the end.
        await conn.execute(
            sa.text(
                "INSERT INTO runs (id, tenant_id, schedule_id, scheduled_for, trigger, status, "
                "attempt_count, created_at, completion_deadline) "
                "SELECT 'run_Z' || lpad(g::text, 25, '0'), 'tenant-a', :sid, "
                "now() + g * interval '1 second', 'schedule', "
                "CASE WHEN g % 2 = 0 THEN 'succeeded' ELSE 'in_progress' END, 1, now(), "
                "CASE WHEN g % 2 = 0 THEN NULL ELSE now() + interval '1 day' END "
                "FROM generate_series(1, :n) AS g"
            ),
            {"n": HERD, "sid": schedule_id},
        )


def plan_rows(plan: str) -> int:
    """The most rows any node of the plan read (returned or filtered out)."""
    returned = [int(n) for n in re.findall(r"actual time=\S+ rows=(\d+)", plan)]
    removed = [int(n) for n in re.findall(r"Rows Removed by \w+: (\d+)", plan)]
    return max(returned + removed)


async def explain(conn: Any, statement: str, params: Any) -> str:
    result = await conn.exec_driver_sql("EXPLAIN (ANALYZE, COSTS OFF) " + statement, params)
    return "\n".join(r[0] for r in result)


async def test_a_ledger_watch_pass_reads_by_index_on_stale_statistics(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    if container.engine.dialect.name != "postgresql":
        pytest.skip("EXPLAIN of the PostgreSQL statements")
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    await stale_statistics_then_a_herd(container, s.id)
    mclock.advance(minutes=5)  # its watermark is stale: this pass checks it
    sent: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, many: bool) -> None:
        if statement.lstrip().startswith("SELECT") and not many:
            sent.append((statement, params))

    sa.event.listen(container.engine.sync_engine, "before_cursor_execute", capture)
    try:
        report = await count_missing_once(uows, mclock())
    finally:
        sa.event.remove(container.engine.sync_engine, "before_cursor_execute", capture)
    assert report.checked == 1
    read = [(st, p) for st, p in sent if "set_config" not in st]
    assert any("schedule_versions" in st for st, _ in read), read
    async with uows() as uow:
        await uow.ledger.claim_watermarks(mclock(), 1)  # the pass's settings, as a pass has them
        for statement, params in read:
            plan = await explain(uow.ledger.conn, statement, params)
            assert "Seq Scan" not in plan, plan
            assert plan_rows(plan) <= 2_000, plan  # the seed's window at most, never the herd
        await uow.rollback()


async def test_the_completion_watchdog_reads_by_index_on_stale_statistics(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    if container.engine.dialect.name != "postgresql":
        pytest.skip("EXPLAIN of the PostgreSQL statement")
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    await stale_statistics_then_a_herd(container, s.id)
    sent: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
        if "completion_deadline <=" in statement:
            sent.append((statement, params))

    sa.event.listen(container.engine.sync_engine, "before_cursor_execute", capture)
    try:
        async with uows() as uow:
            assert await uow.runs.lock_overdue_awaiting(mclock() + timedelta(hours=1), 50) == []
            ((statement, params),) = sent
            plan = await explain(uow.runs.conn, statement, params)
            await uow.rollback()
    finally:
        sa.event.remove(container.engine.sync_engine, "before_cursor_execute", capture)
    assert "Seq Scan" not in plan, plan
    assert "ix_runs_completion_deadline" in plan, plan
