"""The claim's misfire read (`misfire_facts`, domain/claiming.py rule 5) is index probes of
(schedule_id, scheduled_for), backwards, inside the claim's transaction (where the index paths of
servicekit.data.database.CLAIM_PLANNER_SQL are in force): it reads a few rows per late run, not
the schedule's history (here 5,000 finished runs) nor the runs table."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.types import UTCDateTime
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from tests.scheduler.runs.conftest import T0, add_schedule
from tests.scheduler.runs.dispatch_helpers import claim_runs

pytestmark = pytest.mark.postgres

HISTORY = 5_000
LEASE = timedelta(seconds=30)
GRACE = timedelta(seconds=60)
PROBED = {"uq_runs_planned_occurrence", "ix_runs_schedule_history"}


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


async def test_the_misfire_read_probes_the_schedules_index(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    if container.engine.dialect.name != "postgresql":
        pytest.skip("EXPLAIN: PostgreSQL only")
    s = await add_schedule(container, "http://127.0.0.1:9/ok")
    # HISTORY succeeded minutes, then three pending ones the worker came back to 2.5 min late.
    now = T0 + timedelta(minutes=HISTORY + 3, seconds=30)
    async with container.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "INSERT INTO runs (id, tenant_id, schedule_id, scheduled_for, trigger, status,"
                " attempt_count, next_attempt_at, finished_at, created_at)"
                " SELECT 'run_' || lpad(i::text, 6, '0'), 'tenant-a', :sch,"
                " CAST(:t0 AS timestamptz) + i * interval '1 minute', 'schedule',"
                " CASE WHEN i <= :n THEN 'succeeded' ELSE 'pending' END,"
                " CASE WHEN i <= :n THEN 1 ELSE 0 END,"
                " CASE WHEN i > :n THEN CAST(:t0 AS timestamptz) + i * interval '1 minute' END,"
                " CASE WHEN i <= :n THEN CAST(:t0 AS timestamptz) + i * interval '1 minute'"
                " + interval '1 second' END, :t0"
                " FROM generate_series(1, :n + 3) i"
            ).bindparams(sa.bindparam("t0", type_=UTCDateTime())),
            {"sch": s.id, "t0": T0, "n": HISTORY},
        )
        await conn.execute(sa.text("ANALYZE runs"))

    statements: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "last_two" in statement:
            statements.append((statement, parameters))

    sa.event.listen(container.engine.sync_engine, "before_cursor_execute", capture)
    try:
        async with uows() as uow:  # the claim's transaction: CLAIM_PLANNER_SQL is set in it
            claimed = await claim_runs(uow.runs, "w:1", now, now + LEASE, 10)
            assert len(claimed) == 3
            late = [r for r in claimed if r.scheduled_for < now - GRACE]
            assert len(late) == 2
            facts = await uow.runs.misfire_facts(late, now - GRACE)
            minute = timedelta(minutes=1)
            assert facts.latest_missed == {s.id: T0 + (HISTORY + 2) * minute}
            # The later finish of each one's two previous runs: the last of the history's.
            last_done = T0 + HISTORY * minute + timedelta(seconds=1)
            assert facts.predecessor_finished == {r.id: last_done for r in late}
            (statement, parameters) = statements[-1]
            result = await uow.runs.conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters
            )
            (doc,) = result.scalar_one()
            await uow.rollback()
    finally:
        sa.event.remove(container.engine.sync_engine, "before_cursor_execute", capture)
    nodes = _plan_nodes(doc["Plan"])
    on_runs = [n for n in nodes if n.get("Relation Name") == "runs"]
    assert all(n["Node Type"] != "Seq Scan" for n in on_runs), nodes
    assert {n.get("Index Name") for n in on_runs} & PROBED, nodes
    read = sum(
        n.get("Actual Rows", 0) * n.get("Actual Loops", 1)
        + n.get("Rows Removed by Filter", 0)
        + n.get("Rows Removed by Index Recheck", 0)
        for n in on_runs
    )
    assert read <= 20, (read, nodes)
