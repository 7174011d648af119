"""Downgrading below 0007 (claim lanes) deletes the backfill runs (none existed before) and
their delivery attempts with them, so no attempt is left naming a run that is gone (retention,
which deletes attempts with their run, would never remove it). Other runs keep theirs. The
downgrade runs through 0009 and 0008 on the way, on both databases."""

from __future__ import annotations

import sqlalchemy as sa

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import current_revision, downgrade, upgrade

RUN = (
    "INSERT INTO runs (id, tenant_id, schedule_id, scheduled_for, trigger, status, attempt_count,"
    " created_at) VALUES (:id, 't1', 'sch_1', '2026-01-01 00:00:00', :trigger, 'failed', 1,"
    " '2026-01-01 00:00:00')"
)
ATTEMPT = (
    "INSERT INTO delivery_attempts (run_id, number, started_at, duration_ms)"
    " VALUES (:id, 1, '2026-01-01 00:00:00', 5)"
)


async def test_downgrade_deletes_backfill_runs_with_their_attempts(empty_url: str) -> None:
    await upgrade(empty_url)
    engine = create_engine(empty_url)
    try:
        async with engine.begin() as conn:
            for run_id, trigger in (("run_backfill", "backfill"), ("run_manual", "manual")):
                await conn.execute(sa.text(RUN), {"id": run_id, "trigger": trigger})
                await conn.execute(sa.text(ATTEMPT), {"id": run_id})
        await downgrade(empty_url, "0006")
        assert await current_revision(empty_url) == "0006"
        async with engine.connect() as conn:
            run_ids = (await conn.execute(sa.text("SELECT id FROM runs"))).scalars().all()
            attempt_run_ids = (
                (await conn.execute(sa.text("SELECT run_id FROM delivery_attempts")))
                .scalars()
                .all()
            )
        assert run_ids == ["run_manual"]
        assert attempt_run_ids == ["run_manual"]  # before: also "run_backfill", orphaned
        await upgrade(empty_url)  # and back up through 0007..0009
    finally:
        await engine.dispose()
