"""Retention of schedule versions (DESIGN.md §7b): a version goes once it was superseded longer
ago than the run retention and no run left cites it; a schedule's latest version never goes by
age; a purged deleted schedule takes its versions with it. Real SQL (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.adapters.db.retention_store import superseded_versions_batch
from scheduler.adapters.db.tables import runs, schedule_versions
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.service_layer.retention import RetainedTable, RetentionPolicy, prune_once
from tests.scheduler.retention.conftest import DAY, NOW, add_runs, add_schedule

POLICY = RetentionPolicy()  # 90 days of runs


async def add_versions(engine: AsyncEngine, sid: str, ats: list[datetime]) -> None:
    """Versions 1..n written at `ats`, each superseded by the next (the last is the latest)."""
    rows = [
        {
            "schedule_id": sid,
            "version": n,
            "tenant_id": "tenant-a",
            "at": at,
            "superseded_at": ats[n] if n < len(ats) else None,
            "actor": "system",
            "source": "api",
            "state": "active",
            "paused_reason": None,
            "definition": {},
            "changes": [],
        }
        for n, at in enumerate(ats, start=1)
    ]
    async with engine.begin() as conn:
        await conn.execute(sa.insert(schedule_versions), rows)


async def cite(engine: AsyncEngine, run_ids: list[str], version: int, scheduled: datetime) -> None:
    """The runs were planned by `version` when it was in force (before `scheduled`)."""
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(runs)
            .where(runs.c.id.in_(run_ids))
            .values(schedule_version=version, scheduled_for=scheduled)
        )


async def kept(engine: AsyncEngine) -> set[tuple[str, int]]:
    async with engine.connect() as conn:
        q = sa.select(schedule_versions.c.schedule_id, schedule_versions.c.version)
        return {(s, v) for s, v in await conn.execute(q)}


async def test_superseded_uncited_versions_older_than_the_run_retention_go(
    engine: AsyncEngine, uows: SqlUnitOfWorkFactory
) -> None:
    await add_schedule(engine, "sch_a")
    # v1 superseded 200 days ago, v2 150, v3 100, v4 10; v5 is the latest (10 days old).
    ats = [NOW - d * DAY for d in (300, 200, 150, 100, 10)]
    await add_versions(engine, "sch_a", ats)
    # v1's run is old and terminal: the pass deletes it first, then v1 is cited no more.
    old = await add_runs(engine, "sch_a", 1, status="succeeded", finished_at=NOW - 250 * DAY)
    await cite(engine, old, 1, NOW - 250 * DAY)
    # v2's run finished 5 days ago (retried for months): it keeps v2.
    late = await add_runs(engine, "sch_a", 1, status="failed", finished_at=NOW - 5 * DAY)
    await cite(engine, late, 2, NOW - 170 * DAY)
    # v3's run never finished (its tenant was suspended): it keeps v3 whatever its age.
    stuck = await add_runs(engine, "sch_a", 1, status="pending", finished_at=None, prefix="p")
    await cite(engine, stuck, 3, NOW - 120 * DAY)
    # A schedule whose one version is 400 days old: its latest, kept.
    await add_schedule(engine, "sch_quiet")
    await add_versions(engine, "sch_quiet", [NOW - 400 * DAY])

    report = await prune_once(uows, POLICY, NOW)

    assert await kept(engine) == {
        ("sch_a", 2),
        ("sch_a", 3),
        ("sch_a", 4),  # superseded 10 days ago: younger than the run retention
        ("sch_a", 5),
        ("sch_quiet", 1),
    }
    assert report.deleted[RetainedTable.SCHEDULE_VERSIONS] == 1
    # Once v3's run is gone, v3 goes too.
    async with engine.begin() as conn:
        await conn.execute(sa.delete(runs).where(runs.c.id.in_(stuck)))
    await prune_once(uows, POLICY, NOW)
    assert ("sch_a", 3) not in await kept(engine)


async def test_a_purged_deleted_schedule_takes_its_versions(
    engine: AsyncEngine, uows: SqlUnitOfWorkFactory
) -> None:
    await add_schedule(engine, "sch_gone", deleted_at=NOW - 120 * DAY)
    await add_versions(engine, "sch_gone", [NOW - 130 * DAY, NOW - 120 * DAY])
    await add_schedule(engine, "sch_busy", deleted_at=NOW - 120 * DAY)
    await add_versions(engine, "sch_busy", [NOW - 130 * DAY, NOW - 120 * DAY])
    young = await add_runs(engine, "sch_busy", 1, status="failed", finished_at=NOW - 5 * DAY)
    await cite(engine, young, 1, NOW - 125 * DAY)

    report = await prune_once(uows, POLICY, NOW)

    assert await kept(engine) == {("sch_busy", 1), ("sch_busy", 2)}
    assert report.deleted[RetainedTable.SCHEDULE_VERSIONS] == 2


@pytest.mark.postgres
async def test_the_version_batch_reads_its_index(database_url: str, engine: AsyncEngine) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("EXPLAIN: PostgreSQL only")
    query = superseded_versions_batch(NOW - 90 * DAY, 10)
    compiled = query.compile(engine.sync_engine, compile_kwargs={"literal_binds": True})
    async with engine.connect() as conn:
        await conn.execute(sa.text("SET enable_seqscan = off"))
        plan = "\n".join((await conn.execute(sa.text(f"EXPLAIN {compiled}"))).scalars().all())
    assert "ix_schedule_versions_superseded" in plan, plan
    assert "Seq Scan" not in plan, plan  # the runs' side reads an index too
