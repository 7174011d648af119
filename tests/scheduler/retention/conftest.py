"""Retention fixtures: a migrated database (SQLite, and PostgreSQL with TEST_POSTGRES_URL; the
`database_url` fixture of tests/scheduler/conftest.py), its engine, and helpers that write rows
directly so each test sets exact ages and states."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.tables import (
    delivery_attempts,
    idempotency_keys,
    outbox,
    runs,
    schedules,
)
from scheduler.adapters.db.tenant_store import processed_events
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.service_layer.retention import Deleted, RetentionRepository

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
_occurrence = itertools.count(1)  # distinct scheduled_for: the planned-run unique key holds


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(database_url)
    yield eng
    await eng.dispose()


@pytest.fixture
def uows(engine: AsyncEngine) -> SqlUnitOfWorkFactory:
    return SqlUnitOfWorkFactory(engine, SecretBox([b"k" * 32]))


async def one_batch(
    uows: SqlUnitOfWorkFactory, batch: Callable[[RetentionRepository], Awaitable[Deleted]]
) -> Deleted:
    """One retention batch in a unit of work of its own, as `prune_once` runs each."""
    async with uows() as uow:
        deleted = await batch(uow.retention)
        await uow.commit()
    return deleted


async def add_schedule(
    engine: AsyncEngine, sid: str, *, deleted_at: datetime | None = None
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(schedules).values(
                id=sid,
                tenant_id="tenant-a",
                name=sid,
                cron="0 3 * * *",
                timezone="UTC",
                action="webhook",
                target={"url": "https://example.com/hook"},
                payload={},
                retry_policy={},
                misfire_policy="fire_once",
                overlap_policy="allow",
                breaker={"failure_threshold": 5},
                state="active",
                created_at=NOW - 400 * DAY,
                updated_at=NOW - 400 * DAY,
                deleted_at=deleted_at,
                version=1,
                consecutive_failures=0,
                secret_ciphertext="not-a-real-ciphertext",
            )
        )


async def add_runs(
    engine: AsyncEngine,
    schedule_id: str,
    count: int,
    *,
    status: str,
    finished_at: datetime | None,
    attempts: int = 1,
    prefix: str | None = None,
) -> list[str]:
    """`count` runs (each with `attempts` delivery attempts); returns their ids."""
    prefix = prefix or f"run_{schedule_id}_{status}"
    ids = [f"{prefix}_{i}" for i in range(count)]
    base = finished_at or NOW
    minutes = [next(_occurrence) for _ in ids]
    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(runs),
            [
                {
                    "id": rid,
                    "tenant_id": "tenant-a",
                    "schedule_id": schedule_id,
                    "scheduled_for": base - timedelta(minutes=minutes[i]),
                    "trigger": "schedule",
                    "status": status,
                    "skip_reason": "misfire" if status == "skipped" else None,
                    "attempt_count": attempts,
                    "next_attempt_at": None if finished_at else base,
                    "started_at": base - timedelta(minutes=minutes[i]),
                    "finished_at": finished_at,
                    "payload": {},
                    "created_at": base - timedelta(minutes=minutes[i]),
                }
                for i, rid in enumerate(ids)
            ],
        )
        if attempts:
            await conn.execute(
                sa.insert(delivery_attempts),
                [
                    {
                        "run_id": rid,
                        "number": n,
                        "started_at": base,
                        "duration_ms": 5,
                        "status_code": 500,
                    }
                    for rid in ids
                    for n in range(1, attempts + 1)
                ],
            )
    return ids


async def add_idempotency_key(
    engine: AsyncEngine, key: str, schedule_id: str, created_at: datetime
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(idempotency_keys).values(
                tenant_id="tenant-a",
                key=key,
                request_hash="h",
                schedule_id=schedule_id,
                created_at=created_at,
            )
        )


async def add_processed(engine: AsyncEngine, event_id: str, at: datetime) -> None:
    async with engine.begin() as conn:
        await conn.execute(sa.insert(processed_events).values(event_id=event_id, processed_at=at))


async def add_outbox(
    engine: AsyncEngine, prefix: str, count: int, *, sent_at: datetime | None
) -> list[str]:
    """`count` outbox rows created a day before `sent_at` (or unsent, created 400 days before
    NOW); returns their event ids."""
    ids = [f"evt_{prefix}_{i}" for i in range(count)]
    created = (sent_at or NOW - 399 * DAY) - DAY
    async with engine.begin() as conn:
        await conn.execute(
            sa.insert(outbox),
            [
                {
                    "event_id": event_id,
                    "topic": "schedule-events",
                    "key": "sch_a",
                    "type": "schedule.updated",
                    "payload": "{}",
                    "created_at": created,
                    "sent_at": sent_at,
                }
                for event_id in ids
            ],
        )
    return ids


async def ids_of(engine: AsyncEngine, column: sa.ColumnElement[str]) -> set[str]:
    async with engine.connect() as conn:
        return set((await conn.execute(sa.select(column))).scalars().all())


async def count(engine: AsyncEngine, table: sa.Table) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one())
