"""The claim's cost stays bounded by the runs it claims when PostgreSQL's statistics are
stale: right after a burst of new due runs, the planner still believes the runs table is empty. A
per-row re-check planned through the partial due index instead of the primary key would read
every due run once per claimed run (in the 10,000-run lag bench: 4,100 rows filtered per run,
80 ms per claim), doubling the burst's tail.

Measured here with the transaction's own statistics (`pg_stat_xact_user_tables.idx_tup_fetch`:
heap rows fetched through indexes in this transaction), so the test needs no log access.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.run import Run, Trigger
from tests.scheduler.runs.conftest import T0
from tests.scheduler.runs.dispatch_helpers import claim_runs

DUE = 3_000
CLAIM = 50
LEASE = timedelta(seconds=30)


async def test_claim_reads_about_its_window_not_every_due_run(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    if container.engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's planner statistics (SQLite's claim is covered elsewhere)")
    async with container.engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        # Statistics of an EMPTY table, and no autovacuum to refresh them: the burst's state.
        await auto.execute(sa.text("ALTER TABLE runs SET (autovacuum_enabled = off)"))
        await auto.execute(sa.text("ANALYZE runs"))
    due = [
        Run.planned(
            tenant_id=f"tenant-{i % 10}",
            schedule_id=f"sch_{i:05d}",
            scheduled_for=T0,
            now=T0 - timedelta(minutes=1),
            trigger=Trigger.MANUAL,
            run_id=f"run_{i:05d}",
        )
        for i in range(DUE)
    ]
    async with uows() as uow:
        assert await uow.runs.insert_runs(due) == DUE
        await uow.commit()

    now = T0 + timedelta(seconds=1)
    async with uows() as uow:
        claimed = await claim_runs(uow.runs, "w:1", now, now + LEASE, CLAIM)
        fetched = (
            await uow.conn.execute(
                sa.text(
                    "SELECT coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables"
                    " WHERE relname = 'runs'"
                )
            )
        ).scalar_one()
        await uow.commit()

    assert len(claimed) == CLAIM
    # The fair window (8 x the claim) plus one primary-key fetch per claimed run, with room to
    # spare; re-checking through the due index fetched about CLAIM x DUE / 2 rows.
    assert fetched <= 20 * CLAIM, fetched
