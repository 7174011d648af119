"""`EmailStore` on SQLAlchemy Core: the email sender's leases on `outbound_emails` and the
compare-and-set that writes finished SMTP attempts. One transaction per method.

The same discipline as `delivery_store.py`: a claim sets `lease_owner` (one token per claim)
and `lease_expires_at` on due, unleased emails (PostgreSQL: FOR UPDATE SKIP LOCKED, so replicas
take disjoint emails without waiting on each other); a completion is written only while its
email is still pending and leased to the completion's owner, so a sender whose lease was taken
over cannot overwrite the new holder's result or count an attempt twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import or_, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncEngine

from notification.adapters.tables import outbound_emails
from notification.domain.alerts import EmailStatus
from notification.service_layer.ports import EmailCompletion, EmailRecord

PENDING = EmailStatus.PENDING.value
SENT = EmailStatus.SENT.value
_E = outbound_emails
_LEASED_COLUMNS = (
    _E.c.id,
    _E.c.tenant_id,
    _E.c.recipients,
    _E.c.subject,
    _E.c.text_body,
    _E.c.html_body,
    _E.c.attempt_count,
    _E.c.next_attempt_at,
)


class SqlEmailStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._postgres = engine.dialect.name == "postgresql"

    # -- leases -------------------------------------------------------------------------------

    async def acquire_due_emails(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[EmailRecord]:
        due = (
            select(_E.c.id)
            .where(
                _E.c.status == PENDING,
                _E.c.next_attempt_at <= now,
                or_(_E.c.lease_expires_at.is_(None), _E.c.lease_expires_at < now),
            )
            .order_by(_E.c.next_attempt_at)
            .limit(limit)
        )
        lease = {"lease_owner": owner, "lease_expires_at": lease_until}
        if self._postgres:
            picked = due.with_for_update(of=_E, skip_locked=True).cte("picked")
            stmt = update(_E).where(_E.c.id == picked.c.id)
        else:  # one writer at a time: the subquery cannot race another claim
            stmt = update(_E).where(_E.c.id.in_(due.scalar_subquery()))
        async with self.engine.begin() as conn:
            rows = (
                (await conn.execute(stmt.values(**lease).returning(*_LEASED_COLUMNS)))
                .mappings()
                .all()
            )
        return [
            EmailRecord(
                id=r["id"],
                tenant_id=r["tenant_id"],
                recipients=list(r["recipients"]),
                subject=r["subject"],
                text_body=r["text_body"],
                html_body=r["html_body"],
                attempt_count=r["attempt_count"],
            )
            for r in sorted(rows, key=lambda r: (r["next_attempt_at"], r["id"]))
        ]

    async def extend_email_leases(self, leases: Sequence[tuple[str, str]], until: datetime) -> int:
        if not leases:
            return 0
        stmt = (
            update(_E)
            .where(tuple_(_E.c.id, _E.c.lease_owner).in_(sorted(leases)), _E.c.status == PENDING)
            .values(lease_expires_at=until)
        )
        async with self.engine.begin() as conn:
            return max(int((await conn.execute(stmt)).rowcount or 0), 0)

    async def release_emails(self, leases: Sequence[tuple[str, str]], now: datetime) -> int:
        """Give emails back unattempted (a sender stopping): due again at once."""
        if not leases:
            return 0
        stmt = (
            update(_E)
            .where(tuple_(_E.c.id, _E.c.lease_owner).in_(sorted(leases)), _E.c.status == PENDING)
            .values(lease_owner=None, lease_expires_at=None)
        )
        async with self.engine.begin() as conn:
            return max(int((await conn.execute(stmt)).rowcount or 0), 0)

    # -- completion ---------------------------------------------------------------------------

    async def complete_emails(
        self, completions: Sequence[EmailCompletion], now: datetime
    ) -> set[str]:
        written: set[str] = set()
        if not completions:
            return written
        async with self.engine.begin() as conn:
            # Id order: two writers never wait on each other in a cycle.
            for c in sorted(completions, key=lambda c: c.email_id):
                stmt = (
                    update(_E)
                    .where(
                        _E.c.id == c.email_id,
                        _E.c.lease_owner == c.owner,
                        _E.c.status == PENDING,
                    )
                    .values(
                        status=c.status,
                        attempt_count=_E.c.attempt_count + 1,
                        next_attempt_at=c.next_attempt_at,
                        lease_owner=None,
                        lease_expires_at=None,
                        last_error=c.last_error,
                        sent_at=now if c.status == SENT else None,
                    )
                    .returning(_E.c.id)
                )
                if (await conn.execute(stmt)).first() is not None:
                    written.add(c.email_id)
        return written
