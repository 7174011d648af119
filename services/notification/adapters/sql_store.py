"""`NotificationStore` on SQLAlchemy Core (SQLite and PostgreSQL). One transaction per method."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, text, true, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import ColumnElement, Select

from notification.adapters.tables import (
    alert_contacts,
    alert_requests,
    delivery_attempts,
    notifications,
    outbound_emails,
    subscriptions,
    webhook_deliveries,
)
from notification.domain.alerts import EmailStatus
from notification.domain.deliveries import (
    DUE_STATES,
    SUBSCRIPTION_DELETED_ERROR,
    DeliveryStatus,
)
from notification.service_layer.ports import (
    DeliveryRecord,
    DuplicateSubscription,
    NewDelivery,
    NewEmail,
    NotificationRecord,
    SubscriptionLimitReached,
    SubscriptionRecord,
)
from servicekit.data.pagination import Cursor
from webhookdeliver import AttemptRecord

SUBSCRIPTION_COLUMNS = [c for c in subscriptions.c if c.name != "deleted_at"]

# A tenant's subscription creates take turns (PostgreSQL: a transaction-level advisory lock in
# the two-int space, namespace apart; two tenants sharing a 32-bit key only wait for each other).
SUBSCRIPTIONS_LOCK_NAMESPACE = 0x5B5C
_LOCK_TENANT_SUBSCRIPTIONS = text("SELECT pg_advisory_xact_lock(:ns, :key)")
_SQLITE_WRITE_LOCK = text("UPDATE subscriptions SET tenant_id = tenant_id WHERE 1 = 0")


def _tenant_key(tenant_id: str) -> int:
    digest = hashlib.blake2b(tenant_id.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


class _SubscriptionGone(Exception):
    """Rolls a replay or a delete back: the subscription is not live (deleted first)."""


_UPDATABLE = {
    "url",
    "event_types",
    "description",
    "enabled",
    "disabled_reason",
    "secret_enc",
    "previous_secret_enc",
    "previous_secret_expires_at",
    "failing_since",
    "consecutive_failures",
    "updated_at",
}


def subscription_record(row: Mapping[Any, Any]) -> SubscriptionRecord:
    return SubscriptionRecord(
        id=row["id"],
        tenant_id=row["tenant_id"],
        url=row["url"],
        event_types=list(row["event_types"]),
        description=row["description"],
        enabled=bool(row["enabled"]),
        disabled_reason=row["disabled_reason"],
        secret_enc=row["secret_enc"],
        previous_secret_enc=row["previous_secret_enc"],
        previous_secret_expires_at=row["previous_secret_expires_at"],
        failing_since=row["failing_since"],
        consecutive_failures=row["consecutive_failures"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _notification(row: RowMapping) -> NotificationRecord:
    return NotificationRecord(
        id=row["id"],
        tenant_id=row["tenant_id"],
        template=row["template"],
        title=row["title"],
        body=row["body"],
        data=dict(row["data"]),
        created_at=row["created_at"],
        read_at=row["read_at"],
    )


def _after(
    created: Any, ident: Any, cursor: Cursor | None, descending: bool
) -> ColumnElement[bool]:
    """Keyset condition: rows strictly after the cursor in (created_at, id) order."""
    if cursor is None:
        return true()
    if descending:
        return or_(
            created < cursor.created_at, and_(created == cursor.created_at, ident < cursor.id)
        )
    return or_(created > cursor.created_at, and_(created == cursor.created_at, ident > cursor.id))


class SqlNotificationStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._postgres = engine.dialect.name == "postgresql"

    def _dialect_insert(self, table: Any) -> Any:
        """The dialect's INSERT, which has ON CONFLICT."""
        return (postgresql.insert if self._postgres else sqlite.insert)(table)

    def _insert_ignore(self, table: Any) -> Any:
        """INSERT ... ON CONFLICT DO NOTHING."""
        return self._dialect_insert(table).on_conflict_do_nothing()

    async def ping(self) -> bool:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        return True

    # -- subscriptions ------------------------------------------------------------------------

    def _live_subs(self, tenant_id: str) -> Select[Any]:
        return select(*SUBSCRIPTION_COLUMNS).where(
            subscriptions.c.tenant_id == tenant_id, subscriptions.c.deleted_at.is_(None)
        )

    @staticmethod
    def _update_live_sub(tenant_id: str, sub_id: str) -> Any:
        return update(subscriptions).where(
            subscriptions.c.tenant_id == tenant_id,
            subscriptions.c.id == sub_id,
            subscriptions.c.deleted_at.is_(None),
        )

    async def insert_subscription(self, sub: SubscriptionRecord, *, max_per_tenant: int) -> None:
        async with self.engine.begin() as conn:
            # One tenant's creates take turns, so the count below cannot be spent twice.
            if self._postgres:
                await conn.execute(
                    _LOCK_TENANT_SUBSCRIPTIONS,
                    {"ns": SUBSCRIPTIONS_LOCK_NAMESPACE, "key": _tenant_key(sub.tenant_id)},
                )
            else:
                # A write first takes SQLite's write lock (WAL: readers go on) for the whole
                # transaction; reading first would let two writers count the same rows.
                await conn.execute(_SQLITE_WRITE_LOCK)
            live = await conn.scalar(
                select(func.count())
                .select_from(subscriptions)
                .where(
                    subscriptions.c.tenant_id == sub.tenant_id, subscriptions.c.deleted_at.is_(None)
                )
            )
            if int(live or 0) >= max_per_tenant:
                raise SubscriptionLimitReached(max_per_tenant, int(live or 0))
            same_url = await conn.execute(
                select(subscriptions.c.id, subscriptions.c.event_types).where(
                    subscriptions.c.tenant_id == sub.tenant_id,
                    subscriptions.c.deleted_at.is_(None),
                    subscriptions.c.url == sub.url,
                )
            )
            wanted = set(sub.event_types)
            for sub_id, filters in same_url.all():
                if set(filters) == wanted:
                    raise DuplicateSubscription(sub_id)
            await conn.execute(insert(subscriptions).values(**sub.__dict__, deleted_at=None))

    async def get_subscription(self, tenant_id: str, sub_id: str) -> SubscriptionRecord | None:
        async with self.engine.connect() as conn:
            return await self._get_sub(conn, tenant_id, sub_id)

    async def _get_sub(
        self, conn: AsyncConnection, tenant_id: str, sub_id: str, *, lock: bool = False
    ) -> SubscriptionRecord | None:
        query = self._live_subs(tenant_id).where(subscriptions.c.id == sub_id)
        if lock:
            query = query.with_for_update(read=True)
        row = (await conn.execute(query)).mappings().first()
        return subscription_record(row) if row else None

    async def list_subscriptions(
        self, tenant_id: str, limit: int, after: Cursor | None
    ) -> list[SubscriptionRecord]:
        query = (
            self._live_subs(tenant_id)
            .where(_after(subscriptions.c.created_at, subscriptions.c.id, after, False))
            .order_by(subscriptions.c.created_at, subscriptions.c.id)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [subscription_record(r) for r in (await conn.execute(query)).mappings()]

    async def update_subscription(
        self, tenant_id: str, sub_id: str, values: Mapping[str, Any]
    ) -> SubscriptionRecord | None:
        unknown = set(values) - _UPDATABLE
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        async with self.engine.begin() as conn:
            result = await conn.execute(self._update_live_sub(tenant_id, sub_id).values(**values))
            if result.rowcount == 0:
                return None
            return await self._get_sub(conn, tenant_id, sub_id)

    async def delete_subscription(self, tenant_id: str, sub_id: str, now: datetime) -> bool:
        # Soft delete: the delivery log keeps its foreign key. The unfinished deliveries end
        # `dead` with the reason (the claim joins live subscriptions only: they would stay
        # pending forever); an attempt in flight loses its write (no longer due). Deliveries
        # first, then the subscription, then deliveries again: the same lock order as a
        # completion and a replay (`replay_delivery`), and the second pass ends what a replay
        # that held the subscription's lock made pending meanwhile.
        try:
            async with self.engine.begin() as conn:
                await self._end_unfinished_deliveries(conn, tenant_id, sub_id, now)
                result = await conn.execute(
                    self._update_live_sub(tenant_id, sub_id).values(
                        deleted_at=now, enabled=False, updated_at=now
                    )
                )
                if not result.rowcount:
                    raise _SubscriptionGone  # nothing live to delete: write nothing
                await self._end_unfinished_deliveries(conn, tenant_id, sub_id, now)
        except _SubscriptionGone:
            return False
        return True

    @staticmethod
    async def _end_unfinished_deliveries(
        conn: AsyncConnection, tenant_id: str, sub_id: str, now: datetime
    ) -> None:
        d = webhook_deliveries
        await conn.execute(
            update(d)
            .where(
                d.c.tenant_id == tenant_id,
                d.c.subscription_id == sub_id,
                d.c.status.in_([s.value for s in DUE_STATES]),
            )
            .values(
                status=DeliveryStatus.DEAD.value,
                last_error=SUBSCRIPTION_DELETED_ERROR,
                next_attempt_at=None,
                lease_owner=None,
                lease_expires_at=None,
                updated_at=now,
                finished_at=now,
            )
        )

    # -- fan-out ------------------------------------------------------------------------------

    async def enabled_subscriptions(self, tenant_ids: set[str]) -> list[SubscriptionRecord]:
        if not tenant_ids:
            return []
        query = select(*SUBSCRIPTION_COLUMNS).where(
            subscriptions.c.tenant_id.in_(sorted(tenant_ids)),
            subscriptions.c.enabled.is_(True),
            subscriptions.c.deleted_at.is_(None),
        )
        async with self.engine.connect() as conn:
            return [subscription_record(r) for r in (await conn.execute(query)).mappings()]

    async def insert_deliveries(self, rows: Sequence[NewDelivery], now: datetime) -> int:
        if not rows:
            return 0
        values = [
            {
                **row.__dict__,
                "status": DeliveryStatus.PENDING.value,
                "attempt_count": 0,
                "round_attempts": 0,
                "round_started_at": None,
                "next_attempt_at": now,
                "lease_owner": None,
                "lease_expires_at": None,
                "last_error": None,
                "created_at": now,
                "updated_at": now,
                "finished_at": None,
            }
            for row in rows
        ]
        async with self.engine.begin() as conn:
            result = await conn.execute(self._insert_ignore(webhook_deliveries), values)
            return max(int(result.rowcount or 0), 0)

    # -- delivery log -------------------------------------------------------------------------

    async def list_deliveries(
        self, tenant_id: str, sub_id: str, limit: int, after: Cursor | None
    ) -> list[DeliveryRecord]:
        d = webhook_deliveries
        query = (
            select(d)
            .where(
                d.c.tenant_id == tenant_id,
                d.c.subscription_id == sub_id,
                _after(d.c.created_at, d.c.id, after, True),
            )
            .order_by(d.c.created_at.desc(), d.c.id.desc())
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
            return await self._with_attempts(conn, rows)

    async def _with_attempts(
        self, conn: AsyncConnection, rows: Sequence[RowMapping]
    ) -> list[DeliveryRecord]:
        ids = [r["id"] for r in rows]
        attempts: dict[str, list[AttemptRecord]] = {i: [] for i in ids}
        if ids:
            a = delivery_attempts
            query = select(a).where(a.c.delivery_id.in_(ids)).order_by(a.c.delivery_id, a.c.number)
            for r in (await conn.execute(query)).mappings():
                attempts[r["delivery_id"]].append(
                    AttemptRecord(
                        number=r["number"],
                        started_at=r["started_at"],
                        duration_ms=r["duration_ms"],
                        status_code=r["status_code"],
                        error_kind=r["error_kind"],
                        error_message=r["error_message"],
                        response_excerpt=r["response_excerpt"],
                    )
                )
        return [
            DeliveryRecord(
                id=r["id"],
                tenant_id=r["tenant_id"],
                subscription_id=r["subscription_id"],
                event_id=r["event_id"],
                event_type=r["event_type"],
                status=r["status"],
                attempt_count=r["attempt_count"],
                next_attempt_at=r["next_attempt_at"],
                last_error=r["last_error"],
                created_at=r["created_at"],
                updated_at=r["updated_at"],
                finished_at=r["finished_at"],
                attempts=attempts[r["id"]],
            )
            for r in rows
        ]

    async def replay_delivery(
        self, tenant_id: str, sub_id: str, delivery_id: str, now: datetime
    ) -> DeliveryRecord | None:
        d = webhook_deliveries
        where = (d.c.tenant_id == tenant_id, d.c.subscription_id == sub_id, d.c.id == delivery_id)
        try:
            async with self.engine.begin() as conn:
                # Same row, same X-Webhook-Id, fresh retry budget; attempts keep numbering on.
                result = await conn.execute(
                    update(d)
                    .where(*where)
                    .values(
                        status=DeliveryStatus.PENDING.value,
                        round_attempts=0,
                        round_started_at=None,
                        next_attempt_at=now,
                        lease_owner=None,
                        lease_expires_at=None,
                        updated_at=now,
                        finished_at=None,
                    )
                )
                if result.rowcount == 0:
                    return None
                # Then the subscription, shared-locked (a delivery's row before its
                # subscription's, like a completion): a delete that went first means 404 and
                # no replay; one that comes after waits for this and ends the delivery.
                if await self._get_sub(conn, tenant_id, sub_id, lock=True) is None:
                    raise _SubscriptionGone
                rows = (await conn.execute(select(d).where(*where))).mappings().all()
                return (await self._with_attempts(conn, rows))[0]
        except _SubscriptionGone:
            return None

    # -- alerts -------------------------------------------------------------------------------

    async def get_alert_contacts(self, tenant_id: str) -> list[str]:
        async with self.engine.connect() as conn:
            emails = (
                await conn.execute(
                    select(alert_contacts.c.emails).where(alert_contacts.c.tenant_id == tenant_id)
                )
            ).scalar()
        return list(emails or [])

    async def put_alert_contacts(self, tenant_id: str, emails: list[str], now: datetime) -> None:
        stmt = self._dialect_insert(alert_contacts).values(
            tenant_id=tenant_id, emails=emails, updated_at=now
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=[alert_contacts.c.tenant_id],
            set_={"emails": stmt.excluded.emails, "updated_at": stmt.excluded.updated_at},
        )
        async with self.engine.begin() as conn:
            await conn.execute(stmt)

    async def record_alert(
        self,
        request_id: str,
        tenant_id: str,
        template: str,
        notification: NotificationRecord | None,
        email: NewEmail | None,
        now: datetime,
    ) -> bool:
        async with self.engine.begin() as conn:
            first = await conn.execute(
                self._insert_ignore(alert_requests).values(
                    id=request_id, tenant_id=tenant_id, template=template, created_at=now
                )
            )
            if not first.rowcount:
                return False  # already handled (a re-read after a crash, or a duplicate)
            if notification is not None:
                await conn.execute(
                    insert(notifications).values(**notification.__dict__, request_id=request_id)
                )
            if email is not None:
                await conn.execute(
                    insert(outbound_emails).values(
                        **email.__dict__,
                        tenant_id=tenant_id,
                        request_id=request_id,
                        status=EmailStatus.PENDING.value,
                        attempt_count=0,
                        next_attempt_at=now,
                        last_error=None,
                        created_at=now,
                        sent_at=None,
                    )
                )
            return True

    async def list_notifications(
        self, tenant_id: str, limit: int, after: Cursor | None, unread_only: bool
    ) -> list[NotificationRecord]:
        n = notifications
        query = select(n).where(
            n.c.tenant_id == tenant_id, _after(n.c.created_at, n.c.id, after, True)
        )
        if unread_only:
            query = query.where(n.c.read_at.is_(None))
        query = query.order_by(n.c.created_at.desc(), n.c.id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            return [_notification(r) for r in (await conn.execute(query)).mappings()]

    async def mark_notification_read(
        self, tenant_id: str, notification_id: str, now: datetime
    ) -> NotificationRecord | None:
        n = notifications
        where = (n.c.tenant_id == tenant_id, n.c.id == notification_id)
        async with self.engine.begin() as conn:
            # Idempotent: the first read time is kept.
            await conn.execute(update(n).where(*where, n.c.read_at.is_(None)).values(read_at=now))
            row = (await conn.execute(select(n).where(*where))).mappings().first()
        return _notification(row) if row else None
