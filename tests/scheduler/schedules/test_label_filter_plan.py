"""A tenant with 100,000 schedules filters by label through the GIN index (`ix_schedules_labels`,
migration 0013), not a sequential scan of its rows: the plan of the repository's own list
statement, read with EXPLAIN after ANALYZE. PostgreSQL only (SQLite filters with json_extract)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.repository import SqlScheduleRepository
from scheduler.adapters.db.versions import SqlVersionStore
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.versions import UNATTRIBUTED
from scheduler.service_layer.unit_of_work import ListFilter

TENANT = "tenant-big"
ROWS = 100_000
RETRY = json.dumps(
    {
        "max_attempts": 5,
        "initial_backoff_seconds": 10.0,
        "max_backoff_seconds": 3600.0,
        "multiplier": 2.0,
        "max_retry_duration_seconds": 86400.0,
    }
)

FILL = f"""
INSERT INTO schedules (id, tenant_id, name, cron, timezone, action, target, payload,
    retry_policy, misfire_policy, overlap_policy, breaker, state, created_at, updated_at,
    version, consecutive_failures, secret_ciphertext, labels, key)
SELECT 'sch_' || i, '{TENANT}', 'n' || i, '* * * * *', 'UTC', 'event', 'null', 'null',
    '{RETRY}', 'skip', 'allow', '{{"failure_threshold": 5}}', 'active',
    now() + i * interval '1 second', now(), 1, 0, '',
    CASE WHEN i % 1000 = 0
        THEN jsonb_build_object('team', 'team' || (i % 500), 'env', 'prod')
        ELSE jsonb_build_object('team', 'team' || (i % 500)) END,
    'key-' || i
FROM generate_series(1, {ROWS}) AS i
"""


@pytest.fixture
async def big(database_url: str) -> AsyncIterator[AsyncEngine]:
    if not database_url.startswith("postgresql"):
        pytest.skip("the GIN index is PostgreSQL's")
    engine = create_engine(database_url)
    async with engine.begin() as conn:
        await conn.execute(sa.text(FILL))
        await conn.execute(sa.text("ANALYZE schedules"))
    yield engine
    await engine.dispose()


async def _plan(engine: AsyncEngine, filters: ListFilter) -> tuple[str, int, float]:
    async with engine.connect() as conn:
        versions = SqlVersionStore(conn, UNATTRIBUTED)
        repo = SqlScheduleRepository(conn, SecretBox([b"k" * 32]), versions.write)
        q = repo.page_query(TENANT, 51, None, filters)
        sql = str(q.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
        result = await conn.execute(sa.text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}"))
        plan = result.scalar_one()
        started = time.perf_counter()
        rows = len(await repo.list_page(TENANT, limit=51, after=None, filters=filters))
        elapsed = time.perf_counter() - started
    text = json.dumps(plan)
    return text, rows, elapsed


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ((("team", "team7"),), 51),  # 200 match; one page
        ((("env", None),), 51),  # 100 match
        ((("env", None), ("team", "team0")), 51),  # env rows are i % 1000 == 0: team0 all
        ((("team", "nobody"),), 0),
    ],
)
async def test_label_filter_uses_the_gin_index_at_100k(
    big: AsyncEngine, labels: tuple[tuple[str, str | None], ...], expected: int
) -> None:
    plan, rows, elapsed = await _plan(big, ListFilter(labels=labels))
    assert rows == expected
    assert "ix_schedules_labels" in plan, plan
    assert '"Node Type": "Seq Scan"' not in plan, plan
    print(f"labels={labels}: {rows} rows in {elapsed * 1000:.1f} ms")


@pytest.mark.postgres
async def test_a_labels_frequency_is_estimated_from_the_full_list(big: AsyncEngine) -> None:
    """Migration 0018's statistics target keeps every label set of the 100,000 rows (600 of
    them) with its frequency; at the default target team7 (0.2%) was now and then put at 1%,
    and the list then filtered 25,000 rows through the order index instead of the GIN index."""
    async with big.connect() as conn:
        target = await conn.scalar(
            sa.text(
                "SELECT attstattarget FROM pg_attribute "
                "WHERE attrelid = 'schedules'::regclass AND attname = 'labels'"
            )
        )
        assert target == 1000
        for _ in range(5):
            await conn.execute(sa.text("ANALYZE schedules"))
            plan = await conn.scalar(
                sa.text(
                    "EXPLAIN (FORMAT JSON) SELECT id FROM schedules "
                    """WHERE labels @> '{"team": "team7"}'"""
                )
            )
            assert plan[0]["Plan"]["Plan Rows"] == 200, plan
