"""Migration 0011 adds ix_runs_tenant_created (tenant_id, created_at) over non-skipped runs, the
max_runs_per_day count's index, on both databases; its downgrade drops it and a second upgrade
creates it again. On PostgreSQL the count reads it, not the tenant's history by scheduled_for."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import current_revision, downgrade, head_revision, upgrade
from scheduler.adapters.db.types import UTCDateTime
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.tenant import quota_day
from tests.scheduler.runs.conftest import T0

INDEX = "ix_runs_tenant_created"


async def _indexes(url: str) -> dict[str, Any]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            found = await conn.run_sync(lambda c: sa.inspect(c).get_indexes("runs"))
    finally:
        await engine.dispose()
    return {i["name"]: i for i in found}


async def test_the_index_comes_and_goes_with_the_migration(empty_url: str) -> None:
    await upgrade(empty_url)
    index = (await _indexes(empty_url))[INDEX]
    assert index["column_names"] == ["tenant_id", "created_at"]
    await downgrade(empty_url, "0010")
    assert await current_revision(empty_url) == "0010"
    assert INDEX not in await _indexes(empty_url)
    await upgrade(empty_url)
    assert await current_revision(empty_url) == head_revision()
    assert INDEX in await _indexes(empty_url)


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


async def test_the_daily_count_reads_the_index(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    if container.engine.dialect.name != "postgresql":
        pytest.skip("EXPLAIN: PostgreSQL only")
    async with container.engine.begin() as conn:
        # 5,000 runs created over 50 past days, a hundred a day.
        await conn.execute(
            sa.text(
                "INSERT INTO runs (id, tenant_id, schedule_id, scheduled_for, trigger, status,"
                " attempt_count, created_at)"
                " SELECT 'run_' || lpad(i::text, 6, '0'), 'tenant-a', 'sch_1',"
                " CAST(:t0 AS timestamptz) - i * interval '1 minute', 'schedule', 'succeeded', 1,"
                " CAST(:t0 AS timestamptz) - (i / 100 + 1) * interval '1 day'"
                " FROM generate_series(1, 5000) i"
            ).bindparams(sa.bindparam("t0", type_=UTCDateTime())),
            {"t0": T0},
        )
        await conn.execute(sa.text("ANALYZE runs"))
    statements: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "count(" in statement:
            statements.append((statement, parameters))

    sa.event.listen(container.engine.sync_engine, "before_cursor_execute", capture)
    try:
        async with uows() as uow:
            day = quota_day(T0 - timedelta(days=3))
            assert await uow.runs.count_runs_by_tenant(["tenant-a"], *day) == {"tenant-a": 100}
            statement, parameters = statements[-1]
            result = await uow.runs.conn.exec_driver_sql(
                "EXPLAIN (FORMAT JSON) " + statement, parameters
            )
            (doc,) = result.scalar_one()
            await uow.rollback()
    finally:
        sa.event.remove(container.engine.sync_engine, "before_cursor_execute", capture)
    used = {n.get("Index Name") for n in _plan_nodes(doc["Plan"])}
    assert INDEX in used, doc
