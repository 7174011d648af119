"""SQL side of retention (service_layer/retention.py): each method is one batch in one
transaction, at most `limit` rows of its table, oldest first through an index (migration 0002).
Rows others refer to (foreign keys) are deleted after their dependents, in the same transaction.
On PostgreSQL batches lock with SKIP LOCKED, so replicas take disjoint batches."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from notification.adapters.tables import (
    alert_requests,
    delivery_attempts,
    notifications,
    outbound_emails,
    subscriptions,
    webhook_deliveries,
)
from notification.domain.deliveries import DeliveryStatus
from notification.service_layer.retention import Deleted, RetainedTable

FINISHED_DELIVERY = (DeliveryStatus.SUCCEEDED.value, DeliveryStatus.DEAD.value)
FINISHED_EMAIL = ("sent", "failed")
MAX_BATCH = 10_000  # ids travel as bound parameters: PostgreSQL allows 32,767 per statement

d, a, s = webhook_deliveries, delivery_attempts, subscriptions


class SqlRetentionStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"

    def _lock(self, query: sa.Select[Any], of: sa.Table) -> sa.Select[Any]:
        return query.with_for_update(of=of, skip_locked=True) if self.is_postgres else query

    async def delete_finished_deliveries(self, before: datetime, limit: int) -> Deleted:
        _check(limit)
        query = (
            sa.select(d.c.id)
            .where(d.c.finished_at < before, d.c.status.in_(FINISHED_DELIVERY))
            .order_by(d.c.finished_at)
            .limit(limit)
        )
        async with self.engine.begin() as conn:
            ids = await _ids(conn, self._lock(query, d))
            # Re-checked: a delivery replayed since the select is pending again and stays.
            return await _delete_deliveries(conn, ids, d.c.status.in_(FINISHED_DELIVERY))

    async def delete_deliveries_of_deleted_subscriptions(
        self, deleted_before: datetime, limit: int
    ) -> Deleted:
        query = (
            sa.select(d.c.id)
            .join(s, s.c.id == d.c.subscription_id)
            .where(s.c.deleted_at.is_not(None), s.c.deleted_at < deleted_before)
            .limit(limit)
        )
        _check(limit)
        async with self.engine.begin() as conn:
            ids = await _ids(conn, self._lock(query, d))
            return await _delete_deliveries(conn, ids, sa.true())

    async def purge_deleted_subscriptions(self, deleted_before: datetime, limit: int) -> Deleted:
        _check(limit)
        no_deliveries = ~sa.exists(sa.select(sa.literal(1)).where(d.c.subscription_id == s.c.id))
        doomed = (
            sa.select(s.c.id)
            .where(s.c.deleted_at.is_not(None), s.c.deleted_at < deleted_before, no_deliveries)
            .order_by(s.c.deleted_at)
            .limit(limit)
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(sa.delete(s).where(s.c.id.in_(self._lock(doomed, s))))
        return Deleted(_rowcount(result))

    async def delete_notifications(self, before: datetime, limit: int) -> Deleted:
        _check(limit)
        n = notifications
        doomed = sa.select(n.c.id).where(n.c.created_at < before).order_by(n.c.created_at)
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.delete(n).where(n.c.id.in_(self._lock(doomed.limit(limit), n)))
            )
        return Deleted(_rowcount(result))

    async def delete_finished_emails(self, before: datetime, limit: int) -> Deleted:
        _check(limit)
        e = outbound_emails
        doomed = (
            sa.select(e.c.id)
            .where(e.c.created_at < before, e.c.status.in_(FINISHED_EMAIL))
            .order_by(e.c.created_at)
            .limit(limit)
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(sa.delete(e).where(e.c.id.in_(self._lock(doomed, e))))
        return Deleted(_rowcount(result))

    async def delete_alert_requests(self, before: datetime, limit: int) -> Deleted:
        """Dedup ids older than the cutoff that nothing refers to any more (a pending email
        keeps its request)."""
        _check(limit)
        r = alert_requests
        unreferenced = ~sa.exists(
            sa.select(sa.literal(1)).where(notifications.c.request_id == r.c.id)
        ) & ~sa.exists(sa.select(sa.literal(1)).where(outbound_emails.c.request_id == r.c.id))
        doomed = (
            sa.select(r.c.id)
            .where(r.c.created_at < before, unreferenced)
            .order_by(r.c.created_at)
            .limit(limit)
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(sa.delete(r).where(r.c.id.in_(self._lock(doomed, r))))
        return Deleted(_rowcount(result))


async def _delete_deliveries(
    conn: AsyncConnection, ids: list[str], still: sa.ColumnElement[bool]
) -> Deleted:
    if not ids:
        return Deleted(0)
    attempts = await conn.execute(sa.delete(a).where(a.c.delivery_id.in_(ids)))
    deleted = await conn.execute(sa.delete(d).where(d.c.id.in_(ids), still))
    return Deleted(_rowcount(deleted), {RetainedTable.DELIVERY_ATTEMPTS: _rowcount(attempts)})


def _check(limit: int) -> None:
    if not 1 <= limit <= MAX_BATCH:
        raise ValueError(f"batch limit must be 1..{MAX_BATCH}")


async def _ids(conn: AsyncConnection, query: sa.Select[Any]) -> list[str]:
    return list((await conn.execute(query)).scalars().all())


def _rowcount(result: Any) -> int:
    return max(int(result.rowcount or 0), 0)
