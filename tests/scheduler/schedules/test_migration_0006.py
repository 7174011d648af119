"""Migration 0006 (schedule timing, runs.due_at) on both databases: rows from 0005 keep today's
behaviour, the columns match tables.py, SQLite's table rebuild keeps the partial indexes, and
the downgrade returns to 0005."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import (
    current_revision,
    downgrade,
    head_revision,
    upgrade,
)
from scheduler.adapters.db.tables import delivery_attempts, idempotency_keys, runs, schedules

INSERT_0005 = """
INSERT INTO schedules (id, tenant_id, name, cron, timezone, action, target, payload,
  retry_policy, misfire_policy, overlap_policy, breaker, state, paused_reason, next_run_at,
  created_at, updated_at, deleted_at, version, consecutive_failures, secret_ciphertext)
VALUES ('sch_old', 't1', 'old', '0 3 * * *', 'UTC', 'event', 'null', 'null', '{}', 'fire_once',
  'allow', '{}', 'active', NULL, NULL, '2026-01-01 00:00:00', '2026-01-01 00:00:00', NULL, 1, 0,
  'x')
"""


def _columns(connection: sa.Connection, table: str) -> dict[str, bool]:
    return {c["name"]: c["nullable"] for c in sa.inspect(connection).get_columns(table)}


async def test_upgrade_keeps_old_rows_and_matches_the_tables(empty_url: str) -> None:
    await upgrade(empty_url, "0005")
    engine = create_engine(empty_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text(INSERT_0005))
        await upgrade(empty_url)  # to head: later migrations downgrade through too
        assert await current_revision(empty_url) == head_revision()
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(
                        schedules.c.dst_policy,
                        schedules.c.jitter_seconds,
                        schedules.c.planned_runs,
                        schedules.c.run_at,
                        schedules.c.max_runs,
                    )
                )
            ).one()
            assert tuple(row) == ("shift", 0, 0, None, None)
            for table in (schedules, runs):
                stored = await conn.run_sync(_columns, table.name)
                assert stored == {c.name: bool(c.nullable) for c in table.c}
            if engine.dialect.name == "sqlite":
                indexes = dict(
                    (
                        await conn.execute(
                            sa.text(
                                "SELECT name, sql FROM sqlite_master "
                                "WHERE type = 'index' AND tbl_name = 'schedules'"
                            )
                        )
                    ).all()
                )
                assert (
                    "WHERE state = 'active' AND deleted_at IS NULL" in indexes["ix_schedules_due"]
                )
                assert "WHERE deleted_at IS NOT NULL" in indexes["ix_schedules_deleted"]
                assert "ix_schedules_tenant_order" in indexes
        await downgrade(empty_url, "0005")
        assert await current_revision(empty_url) == "0005"
        async with engine.connect() as conn:
            columns = await conn.run_sync(_columns, "schedules")
            assert "dst_policy" not in columns
            assert columns["cron"] is False
            assert "due_at" not in await conn.run_sync(_columns, "runs")
            names = (await conn.execute(sa.text("SELECT name FROM schedules"))).scalars().all()
            assert names == ["old"]
    finally:
        await engine.dispose()


T = datetime(2026, 1, 1, tzinfo=UTC)


def _schedule(id: str, **kw: object) -> dict[str, object]:
    return {
        "id": id,
        "tenant_id": "t1",
        "name": id,
        "cron": "0 3 * * *",
        "timezone": "UTC",
        "action": "event",
        "target": None,
        "payload": None,
        "retry_policy": {},
        "misfire_policy": "fire_once",
        "overlap_policy": "allow",
        "breaker": {},
        "state": "active",
        "paused_reason": None,
        "next_run_at": T,
        "created_at": T,
        "updated_at": T,
        "version": 1,
        "consecutive_failures": 0,
        "secret_ciphertext": "x",
        **kw,
    }


def _run_with_attempt(schedule_id: str) -> tuple[dict[str, object], dict[str, object]]:
    run_id = f"run_{schedule_id}"
    run = {
        "id": run_id,
        "tenant_id": "t1",
        "schedule_id": schedule_id,
        "scheduled_for": T,
        "trigger": "schedule",
        "status": "succeeded",
        "attempt_count": 1,
        "created_at": T,
    }
    attempt = {"run_id": run_id, "number": 1, "started_at": T, "duration_ms": 5}
    return run, attempt


def _key(schedule_id: str) -> dict[str, object]:
    return {
        "tenant_id": "t1",
        "key": f"key-{schedule_id}",
        "request_hash": "h",
        "schedule_id": schedule_id,
        "created_at": T,
    }


async def test_downgrade_leaves_only_rows_the_old_code_reads(empty_url: str) -> None:
    """completed -> paused ('completed'); a one-shot goes with its runs, attempts and keys; the
    other schedules keep theirs."""
    await upgrade(empty_url)
    engine = create_engine(empty_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                sa.insert(schedules),
                [
                    _schedule("sch_cron"),
                    _schedule("sch_done", state="completed", next_run_at=None, max_runs=1),
                    _schedule("sch_once", cron=None, run_at=T, state="completed"),
                ],
            )
            for sid in ("sch_cron", "sch_once"):
                run, attempt = _run_with_attempt(sid)
                await conn.execute(sa.insert(runs).values(**run))
                await conn.execute(sa.insert(delivery_attempts).values(**attempt))
                await conn.execute(sa.insert(idempotency_keys).values(**_key(sid)))
        await downgrade(empty_url, "0005")
        async with engine.connect() as conn:
            q = "SELECT id, state, paused_reason, next_run_at FROM schedules ORDER BY id"
            rows = (await conn.execute(sa.text(q))).all()
            assert [(r[0], r[1], r[2]) for r in rows] == [
                ("sch_cron", "active", None),
                ("sch_done", "paused", "completed"),
            ]
            assert rows[1][3] is None
            for table, column in (
                ("runs", "schedule_id"),
                ("idempotency_keys", "schedule_id"),
                ("delivery_attempts", "run_id"),
            ):
                left = (
                    (await conn.execute(sa.text(f"SELECT {column} FROM {table}"))).scalars().all()
                )
                assert left == (["run_sch_cron"] if table == "delivery_attempts" else ["sch_cron"])
    finally:
        await engine.dispose()
