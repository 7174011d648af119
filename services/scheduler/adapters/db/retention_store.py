"""SQL side of retention (service_layer/retention.py), the unit of work's `retention`: each
method is one batch on the unit of work's connection, bounded by `limit` rows of its table.

Batches select their rows oldest first through an index (migration 0005, 0003 for
processed_events, 0004 for sent outbox rows, 0014 for superseded versions), so a batch costs
O(limit), never O(table) (a superseded version still cited by a run is looked at again by each
batch: such versions are few, the runs that outlive the retention). On
PostgreSQL the selection takes row locks with SKIP LOCKED: two replicas pruning at once take
disjoint batches instead of waiting on each other. Partial-index predicates are SQL literals
(never bound parameters), so PostgreSQL can match them to the partial indexes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from scheduler.adapters.db.dialect import rowcount
from scheduler.adapters.db.tables import (
    SUPERSEDED_SQL,
    delivery_attempts,
    idempotency_keys,
    outbox,
    runs,
    schedule_versions,
    schedules,
)
from scheduler.adapters.db.tenant_store import processed_events
from scheduler.domain.planning import MAX_LOOKAHEAD
from scheduler.service_layer.retention import Deleted, RetainedTable

TERMINAL_SQL = "status IN ('succeeded', 'failed', 'skipped')"  # ix_runs_terminal_finished
DELETED_SQL = "deleted_at IS NOT NULL"  # ix_schedules_deleted
SENT_SQL = "sent_at IS NOT NULL"  # ix_outbox_sent_at; unsent rows are the relay's backlog
# Ids of a batch travel as bound parameters: PostgreSQL allows 32,767 per statement.
MAX_BATCH = 10_000
# How much later than its creation a run's scheduled_for can be: planned ahead by at most the
# planner's lookahead (manual, replay and backfill runs are for now or the past), plus room for
# clocks that disagree between processes. A run citing a version was created before the next
# one was written, so its scheduled_for is before that instant plus this (retention's bound).
MAX_RUN_LEAD = MAX_LOOKAHEAD + timedelta(hours=1)


class SqlRetentionRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self.is_postgres = conn.dialect.name == "postgresql"

    def _lock(self, query: sa.Select[Any]) -> sa.Select[Any]:
        # SQLite has one writer and no row locks; PostgreSQL replicas skip each other's rows.
        return query.with_for_update(skip_locked=True) if self.is_postgres else query

    async def delete_terminal_runs(self, finished_before: datetime, limit: int) -> Deleted:
        """Terminal runs finished before the cutoff, with their delivery attempts."""
        _check(limit)
        conn = self.conn
        ids = await _ids(conn, self._lock(terminal_runs_batch(finished_before, limit)))
        if not ids:
            return Deleted(0)
        attempts = await conn.execute(
            sa.delete(delivery_attempts).where(delivery_attempts.c.run_id.in_(ids))
        )
        # The predicate again: whatever happened since the select, only terminal runs go.
        deleted = await conn.execute(
            sa.delete(runs).where(runs.c.id.in_(ids), sa.text(TERMINAL_SQL))
        )
        return Deleted(rowcount(deleted), {RetainedTable.DELIVERY_ATTEMPTS: rowcount(attempts)})

    async def purge_deleted_schedules(self, deleted_before: datetime, limit: int) -> Deleted:
        """Soft-deleted schedules older than the cutoff that have no run left, with their
        idempotency keys."""
        _check(limit)
        conn = self.conn
        ids = await _ids(conn, self._lock(deleted_schedules_batch(deleted_before, limit)))
        if not ids:
            return Deleted(0)
        keys = await conn.execute(
            sa.delete(idempotency_keys).where(idempotency_keys.c.schedule_id.in_(ids))
        )
        deleted = await conn.execute(
            sa.delete(schedules).where(schedules.c.id.in_(ids), sa.text(DELETED_SQL), _NO_RUNS)
        )
        # Their versions go with them (a schedule still there, a run came back meanwhile, keeps
        # its own).
        gone = ~sa.exists(sa.select(sa.literal(1)).where(schedules.c.id == v.c.schedule_id))
        versions = await conn.execute(sa.delete(v).where(v.c.schedule_id.in_(ids), gone))
        return Deleted(
            rowcount(deleted),
            {
                RetainedTable.IDEMPOTENCY_KEYS: rowcount(keys),
                RetainedTable.SCHEDULE_VERSIONS: rowcount(versions),
            },
        )

    async def delete_superseded_versions(self, superseded_before: datetime, limit: int) -> Deleted:
        """Versions superseded before the cutoff that no run left cites."""
        _check(limit)
        doomed = self._lock(superseded_versions_batch(superseded_before, limit))
        key = sa.tuple_(v.c.schedule_id, v.c.version)
        result = await self.conn.execute(sa.delete(v).where(key.in_(doomed)))
        return Deleted(rowcount(result))

    async def delete_idempotency_keys(self, created_before: datetime, limit: int) -> Deleted:
        _check(limit)
        t = idempotency_keys
        doomed = self._lock(idempotency_keys_batch(created_before, limit))
        result = await self.conn.execute(
            sa.delete(t).where(sa.tuple_(t.c.tenant_id, t.c.key).in_(doomed))
        )
        return Deleted(rowcount(result))

    async def delete_processed_events(self, processed_before: datetime, limit: int) -> Deleted:
        _check(limit)
        t = processed_events
        doomed = self._lock(processed_events_batch(processed_before, limit))
        result = await self.conn.execute(sa.delete(t).where(t.c.event_id.in_(doomed)))
        return Deleted(rowcount(result))

    async def delete_sent_outbox(self, sent_before: datetime, limit: int) -> Deleted:
        """Outbox rows the bus acknowledged before the cutoff; unsent rows (the relay's
        backlog) are never selected, whatever their age."""
        _check(limit)
        doomed = self._lock(sent_outbox_batch(sent_before, limit))
        result = await self.conn.execute(sa.delete(outbox).where(outbox.c.id.in_(doomed)))
        return Deleted(rowcount(result))


# Batch selections, oldest first, each on its index (tests EXPLAIN them on PostgreSQL).
_NO_RUNS = ~sa.exists(sa.select(sa.literal(1)).where(runs.c.schedule_id == schedules.c.id))


def terminal_runs_batch(before: datetime, limit: int) -> sa.Select[Any]:
    return (
        sa.select(runs.c.id)
        .where(sa.text(TERMINAL_SQL), runs.c.finished_at < before)
        .order_by(runs.c.finished_at)
        .limit(limit)
    )


def deleted_schedules_batch(before: datetime, limit: int) -> sa.Select[Any]:
    return (
        sa.select(schedules.c.id)
        .where(sa.text(DELETED_SQL), schedules.c.deleted_at < before, _NO_RUNS)
        .order_by(schedules.c.deleted_at)
        .limit(limit)
    )


v = schedule_versions


def superseded_versions_batch(before: datetime, limit: int) -> sa.Select[Any]:
    """Superseded before `before`, oldest first, cited by no run: a run citing one has
    scheduled_for < before + MAX_RUN_LEAD, so the check reads only runs that old (by
    ix_runs_schedule_history or ix_runs_tenant_scheduled), the few that outlived the run
    retention and the lead's slice."""
    cited = sa.exists(
        sa.select(sa.literal(1)).where(
            runs.c.tenant_id == v.c.tenant_id,
            runs.c.schedule_id == v.c.schedule_id,
            runs.c.scheduled_for < before + MAX_RUN_LEAD,
            runs.c.schedule_version == v.c.version,
        )
    )
    return (
        sa.select(v.c.schedule_id, v.c.version)
        .where(sa.text(SUPERSEDED_SQL), v.c.superseded_at < before, ~cited)
        .order_by(v.c.superseded_at)
        .limit(limit)
    )


def idempotency_keys_batch(before: datetime, limit: int) -> sa.Select[Any]:
    t = idempotency_keys
    return (
        sa.select(t.c.tenant_id, t.c.key)
        .where(t.c.created_at < before)
        .order_by(t.c.created_at)
        .limit(limit)
    )


def processed_events_batch(before: datetime, limit: int) -> sa.Select[Any]:
    t = processed_events
    return (
        sa.select(t.c.event_id)
        .where(t.c.processed_at < before)
        .order_by(t.c.processed_at)
        .limit(limit)
    )


def sent_outbox_batch(before: datetime, limit: int) -> sa.Select[Any]:
    return (
        sa.select(outbox.c.id)
        .where(sa.text(SENT_SQL), outbox.c.sent_at < before)
        .order_by(outbox.c.sent_at)
        .limit(limit)
    )


def _check(limit: int) -> None:
    if not 1 <= limit <= MAX_BATCH:
        raise ValueError(f"batch limit must be 1..{MAX_BATCH}")


async def _ids(conn: AsyncConnection, query: sa.Select[Any]) -> list[str]:
    return list((await conn.execute(query)).scalars().all())
