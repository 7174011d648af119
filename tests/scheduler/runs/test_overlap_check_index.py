"""The overlap check ("is an earlier run of this schedule unfinished") reads only the schedule's
unfinished runs (ix_runs_schedule_unfinished, migration 0009), never its finished history, also
inside the claim's transaction (where the index paths of servicekit.data.database.CLAIM_PLANNER_SQL
are in force). Before that index the check read ix_runs_schedule_history and filtered every
finished run in front of the candidate: here 5,000 per check."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.types import UTCDateTime
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.policies import OverlapPolicy
from tests.scheduler.runs.conftest import T0, add_schedule
from tests.scheduler.runs.dispatch_helpers import claim_runs

pytestmark = pytest.mark.postgres

HISTORY = 5_000
LEASE = timedelta(seconds=30)


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


async def test_the_overlap_check_reads_the_unfinished_runs_only(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    if container.engine.dialect.name != "postgresql":
        pytest.skip("EXPLAIN: PostgreSQL only")
    s = await add_schedule(container, "http://127.0.0.1:9/ok", overlap=OverlapPolicy.SKIP)
    now = T0 + timedelta(days=30)
    async with container.engine.begin() as conn:
        # HISTORY finished runs, one earlier run still in progress (its lease far ahead: not
        # claimable), and the candidate due now.
        await conn.execute(
            sa.text(
                "INSERT INTO runs (id, tenant_id, schedule_id, scheduled_for, trigger, status,"
                " attempt_count, next_attempt_at, lease_owner, lease_expires_at, created_at)"
                " SELECT 'run_' || lpad(i::text, 6, '0'), 'tenant-a', :sch,"
                " CAST(:t0 AS timestamptz) + i * interval '1 minute', 'schedule',"
                " CASE WHEN i = :n THEN 'in_progress' WHEN i = :n + 1 THEN 'pending'"
                " ELSE 'succeeded' END, 1, CASE WHEN i = :n + 1 THEN :now END,"
                " CASE WHEN i = :n THEN 'w:other' END,"
                " CASE WHEN i = :n THEN :now + interval '1 hour' END, :t0"
                " FROM generate_series(1, :n + 1) i"
            ).bindparams(
                sa.bindparam("t0", type_=UTCDateTime()), sa.bindparam("now", type_=UTCDateTime())
            ),
            {"sch": s.id, "t0": T0, "now": now, "n": HISTORY},
        )
        await conn.execute(sa.text("ANALYZE runs"))

    statements: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "earlier" in statement:
            statements.append((statement, parameters))

    sa.event.listen(container.engine.sync_engine, "before_cursor_execute", capture)
    try:
        async with uows() as uow:  # the claim's transaction: CLAIM_PLANNER_SQL is set in it
            (candidate,) = await claim_runs(uow.runs, "w:1", now, now + LEASE, 10)
            assert await uow.runs.earlier_unfinished([candidate]) == {candidate.id: 1}
            (statement, parameters) = statements[-1]
            result = await uow.runs.conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters
            )
            (doc,) = result.scalar_one()
            await uow.rollback()
    finally:
        sa.event.remove(container.engine.sync_engine, "before_cursor_execute", capture)
    nodes = _plan_nodes(doc["Plan"])
    used = {n.get("Index Name") for n in nodes if n.get("Relation Name") == "runs"}
    assert "ix_runs_schedule_unfinished" in used, nodes
    assert "ix_runs_schedule_history" not in used, nodes
    # The rows read are the unfinished ones (the earlier one, and the candidate itself which
    # the check excludes), not the 5,000 finished runs in front of it.
    read = sum(
        n.get("Actual Rows", 0)
        + n.get("Rows Removed by Filter", 0)
        + n.get("Rows Removed by Index Recheck", 0)
        for n in nodes
        if n.get("Relation Name") == "runs"
    )
    assert read <= 10, (read, nodes)
