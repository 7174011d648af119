"""`DeliveryStore` on SQLAlchemy Core: the dispatcher's leases on `webhook_deliveries` and the
compare-and-set that writes finished attempts. One transaction per method.

A claim sets `lease_owner` (one token per claim) and `lease_expires_at` on due deliveries of
live, enabled subscriptions. PostgreSQL: one statement, `UPDATE ... FROM (SELECT ... FOR UPDATE
SKIP LOCKED LIMIT n) RETURNING` joined to the subscriptions, so replicas take disjoint
deliveries without waiting on each other. SQLite (one writer at a time): the UPDATE with its
RETURNING, then the subscriptions. A claimed delivery that still held an owner had its lease
expire unfinished: the claim counts and records its lost attempt (`worker_lost`) in the same
transaction (domain/deliveries.py "Lost attempts").

A completion is written only while its delivery is still due and leased to the completion's
owner; the others are dropped (their lease expired and another claim took them, or a replay
reset them), so an attempt number is never written twice. Either way the endpoint streaks of
the written attempts follow in the same transaction, their rows locked in id order.

PostgreSQL's claim and completion run on asyncpg directly (delivery_pg.py: constant SQL that
asyncpg prepares once per connection, rows mapped straight to records); the completion writes
the deliveries, their attempts and reads the streaks it changes in one statement. SQLite keeps
SQLAlchemy Core: the completion row by row, then the streaks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, insert, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from notification.adapters import delivery_pg
from notification.adapters.destinations import SqlClaimFlow
from notification.adapters.sql_store import SUBSCRIPTION_COLUMNS, subscription_record
from notification.adapters.tables import (
    DUE_STATUSES_SQL,
    delivery_attempts,
    subscriptions,
    webhook_deliveries,
)
from notification.domain.deliveries import (
    DUE_STATES,
    LOST_ATTEMPT_KIND,
    LOST_ATTEMPT_MESSAGE,
    EndpointHealth,
    StreakChange,
    streak_changes,
)
from notification.service_layer.flow_ports import ClaimGate
from notification.service_layer.ports import (
    ClaimedDelivery,
    CompletionReport,
    DeliveryCompletion,
    SubscriptionRecord,
)
from servicekit.data.database import asyncpg_connection
from webhookdeliver import AttemptRecord

_DUE = [s.value for s in DUE_STATES]
_TERMINAL = delivery_pg.TERMINAL
_DUE_SQL = text(f"webhook_deliveries.{DUE_STATUSES_SQL}")
_D = webhook_deliveries
_S = subscriptions
_CLAIMED_COLUMNS = (
    _D.c.id,
    _D.c.subscription_id,
    _D.c.event_type,
    _D.c.body,
    _D.c.attempt_count,
    _D.c.round_attempts,
    _D.c.round_started_at,
)


class SqlDeliveryStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._postgres = engine.dialect.name == "postgresql"

    # -- leases -------------------------------------------------------------------------------

    async def acquire_due_deliveries(
        self,
        owner: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        *,
        gate: ClaimGate | None = None,
    ) -> list[ClaimedDelivery]:
        if self._postgres:
            async with self.engine.begin() as conn:
                db = await asyncpg_connection(conn)
                await db.execute(delivery_pg.CLAIM_PLANNER)
                rows = await db.fetch(
                    delivery_pg.CLAIM, owner, now, lease_until, limit, *delivery_pg.CLAIM_LOST_ARGS
                )
                claimed = delivery_pg.claimed_of(rows)
                if gate is not None and claimed:
                    claimed = await gate.admit_claimed(claimed, SqlClaimFlow(conn), owner, now)
            return claimed
        due = (
            select(_D.c.id)
            .join(_S, _S.c.id == _D.c.subscription_id)
            .where(
                _DUE_SQL,  # literal, as in the partial index's predicate
                _D.c.next_attempt_at <= now,
                or_(_D.c.lease_expires_at.is_(None), _D.c.lease_expires_at < now),
                _S.c.enabled.is_(True),
                _S.c.deleted_at.is_(None),
            )
            .order_by(_D.c.next_attempt_at)
            .limit(limit)
        )
        stmt = (
            update(_D)
            .where(_D.c.id.in_(due.scalar_subquery()))
            .values(lease_owner=owner, lease_expires_at=lease_until)
            .returning(*_CLAIMED_COLUMNS)
        )
        async with self.engine.begin() as conn:
            # First (a write: the transaction takes the write lock before it reads), the lost
            # attempts of the deliveries about to be claimed: those still holding an owner. The
            # claim below picks the same rows (this write changes none of its conditions).
            lost = await self._count_lost_attempts_sqlite(conn, due, now, lease_until)
            leased = (await conn.execute(stmt)).mappings().all()
            if not leased:
                return []
            sub_ids = sorted({r["subscription_id"] for r in leased})
            subs = {
                r["id"]: subscription_record(r)
                for r in (
                    await conn.execute(select(*SUBSCRIPTION_COLUMNS).where(_S.c.id.in_(sub_ids)))
                ).mappings()
            }
            claimed = [
                ClaimedDelivery(
                    id=r["id"],
                    tenant_id=subs[r["subscription_id"]].tenant_id,
                    event_type=r["event_type"],
                    body=bytes(r["body"]),
                    attempt_count=r["attempt_count"],
                    round_attempts=r["round_attempts"],
                    round_started_at=r["round_started_at"],
                    subscription=subs[r["subscription_id"]],
                    lost_attempt=r["id"] in lost,
                )
                for r in leased
            ]
            if gate is not None:
                claimed = await gate.admit_claimed(claimed, SqlClaimFlow(conn), owner, now)
        return claimed

    async def _count_lost_attempts_sqlite(
        self, conn: AsyncConnection, due: Select[Any], now: datetime, lease_until: datetime
    ) -> set[str]:
        """Count and record the lost attempt of each of the `due` deliveries whose lease
        expired unfinished (delivery_pg.CLAIM does the same in its one statement)."""
        counted = (
            update(_D)
            .where(_D.c.id.in_(due.scalar_subquery()), _D.c.lease_owner.is_not(None))
            .values(
                attempt_count=_D.c.attempt_count + 1,
                round_attempts=_D.c.round_attempts + 1,
                last_error=f"{LOST_ATTEMPT_KIND}: {LOST_ATTEMPT_MESSAGE}",
                updated_at=now,
            )
            .returning(_D.c.id, _D.c.attempt_count, _D.c.lease_expires_at, _D.c.round_started_at)
        )
        rows = (await conn.execute(counted)).mappings().all()
        if not rows:
            return set()
        lease_length = lease_until - now  # the lost claim's, as far as this store can tell
        started = {r["id"]: r["lease_expires_at"] - lease_length for r in rows}
        unstarted = [r["id"] for r in rows if r["round_started_at"] is None]
        if unstarted:
            await conn.execute(
                update(_D).where(_D.c.id == bindparam("b_id")),
                [{"b_id": i, "round_started_at": started[i]} for i in sorted(unstarted)],
            )
        await conn.execute(
            insert(delivery_attempts),
            [
                {
                    "delivery_id": r["id"],
                    "number": r["attempt_count"],
                    "started_at": started[r["id"]],
                    "duration_ms": 0,
                    "error_kind": LOST_ATTEMPT_KIND,
                    "error_message": LOST_ATTEMPT_MESSAGE,
                }
                for r in rows
            ],
        )
        return set(started)

    async def extend_delivery_leases(
        self, leases: Sequence[tuple[str, str]], until: datetime
    ) -> int:
        if not leases:
            return 0
        stmt = (
            update(_D)
            .where(
                _D.c.id == bindparam("b_id"),
                _D.c.lease_owner == bindparam("b_owner"),
                or_(*(_D.c.status == s for s in _DUE)),  # no IN: an executemany cannot expand
            )
            .values(lease_expires_at=until)
        )
        async with self.engine.begin() as conn:
            # Id order, like the completion write: two writers never wait on each other in a cycle.
            await conn.execute(stmt, [{"b_id": i, "b_owner": o} for i, o in sorted(leases)])
        return len(leases)

    async def release_deliveries(self, leases: Sequence[tuple[str, str]], now: datetime) -> int:
        """Give deliveries back unattempted (a dispatcher stopping): due again at once."""
        if not leases:
            return 0
        stmt = (
            update(_D)
            .where(_D.c.id == bindparam("b_id"), _D.c.lease_owner == bindparam("b_owner"))
            .values(lease_owner=None, lease_expires_at=None, updated_at=now)
        )
        async with self.engine.begin() as conn:
            await conn.execute(stmt, [{"b_id": i, "b_owner": o} for i, o in sorted(leases)])
        return len(leases)

    # -- completion ---------------------------------------------------------------------------

    async def complete_deliveries(
        self, completions: Sequence[DeliveryCompletion], now: datetime
    ) -> CompletionReport:
        if not completions:
            return CompletionReport(set(), {})
        async with self.engine.begin() as conn:
            if self._postgres:
                return await self._complete_pg(conn, completions, now)
            written = await self._settle_leased_sqlite(conn, completions, now)
            failing = await self._apply_streaks(conn, _changes_of(completions, written))
        return CompletionReport(written, failing)

    async def _complete_pg(
        self, conn: AsyncConnection, completions: Sequence[DeliveryCompletion], now: datetime
    ) -> CompletionReport:
        db = await asyncpg_connection(conn)
        rows = await db.fetch(delivery_pg.COMPLETE, *delivery_pg.complete_args(completions, now))
        written, priors = delivery_pg.split_completed(rows)
        updates, failing = _streaks_after(_changes_of(completions, written), priors)
        if updates:
            await db.execute(
                delivery_pg.UPDATE_STREAKS,
                [i for i, _ in updates],
                [h.failing_since for _, h in updates],
                [h.consecutive_failures for _, h in updates],
            )
        return CompletionReport(written, failing)

    async def _settle_leased_sqlite(
        self, conn: AsyncConnection, completions: Sequence[DeliveryCompletion], now: datetime
    ) -> set[str]:
        written: set[str] = set()
        for c in sorted(completions, key=lambda c: c.delivery_id):
            counted = 0 if c.attempt is None else 1  # None: ended at a take-over
            stmt = (
                update(_D)
                .where(
                    _D.c.id == c.delivery_id,
                    _D.c.lease_owner == c.owner,
                    _D.c.status.in_(_DUE),
                )
                .values(
                    status=c.status,
                    attempt_count=_D.c.attempt_count + counted,
                    round_attempts=_D.c.round_attempts + counted,
                    round_started_at=c.round_started_at,
                    next_attempt_at=c.next_attempt_at,
                    lease_owner=None,
                    lease_expires_at=None,
                    last_error=c.last_error,
                    updated_at=now,
                    finished_at=now if c.status in _TERMINAL else None,
                )
                .returning(_D.c.id)
            )
            if (await conn.execute(stmt)).first() is not None:
                written.add(c.delivery_id)
        attempts = [
            {"delivery_id": c.delivery_id, **_attempt_values(c.attempt)}
            for c in completions
            if c.delivery_id in written and c.attempt is not None
        ]
        if attempts:
            await conn.execute(insert(delivery_attempts), attempts)
        return written

    async def _apply_streaks(
        self, conn: AsyncConnection, changes: Sequence[StreakChange]
    ) -> dict[str, EndpointHealth]:
        """Apply each endpoint's streak change to its row. Rows that a clearing change finds
        already clear are neither read nor locked (the common case touches no row)."""
        if not changes:
            return {}
        ids = sorted(c.subscription_id for c in changes)
        growing = [c.subscription_id for c in changes if not c.clears]
        query = (
            select(_S.c.id, _S.c.failing_since, _S.c.consecutive_failures)
            .where(
                _S.c.id.in_(ids),
                or_(
                    _S.c.id.in_(growing),
                    _S.c.consecutive_failures > 0,
                    _S.c.failing_since.is_not(None),
                ),
            )
            .order_by(_S.c.id)
        )
        priors = {
            row["id"]: EndpointHealth(row["failing_since"], row["consecutive_failures"])
            for row in (await conn.execute(query)).mappings()
        }
        updates, failing = _streaks_after(changes, priors)
        if updates:
            await conn.execute(
                update(_S).where(_S.c.id == bindparam("b_id")),
                [
                    {
                        "b_id": sub_id,
                        "failing_since": h.failing_since,
                        "consecutive_failures": h.consecutive_failures,
                    }
                    for sub_id, h in updates
                ],
            )
        return failing

    async def disable_subscriptions(
        self, sub_ids: Sequence[str], reason: str, now: datetime
    ) -> list[SubscriptionRecord]:
        """Disable the still-enabled ones; returns those this call disabled."""
        if not sub_ids:
            return []
        stmt = (
            update(_S)
            .where(_S.c.id.in_(sorted(sub_ids)), _S.c.enabled.is_(True))
            .values(enabled=False, disabled_reason=reason, updated_at=now)
            .returning(*SUBSCRIPTION_COLUMNS)
        )
        async with self.engine.begin() as conn:
            return [subscription_record(r) for r in (await conn.execute(stmt)).mappings()]


def _attempt_values(a: AttemptRecord) -> dict[str, Any]:
    return {
        "number": a.number,
        "started_at": a.started_at,
        "duration_ms": a.duration_ms,
        "status_code": a.status_code,
        "error_kind": a.error_kind,
        "error_message": a.error_message,
        "response_excerpt": a.response_excerpt,
    }


def _changes_of(completions: Sequence[DeliveryCompletion], written: set[str]) -> list[StreakChange]:
    """The streak changes of the written attempts (a dropped completion changes nothing, nor
    does a delivery ended at a take-over: a lost attempt is not the endpoint's failure)."""
    return streak_changes(
        (c.subscription_id, c.ok, c.attempt.started_at)
        for c in completions
        if c.delivery_id in written and c.attempt is not None
    )


def _streaks_after(
    changes: Sequence[StreakChange], priors: Mapping[str, EndpointHealth]
) -> tuple[list[tuple[str, EndpointHealth]], dict[str, EndpointHealth]]:
    """Each change applied to its endpoint's prior streak (`priors`: the rows read and locked,
    which include every endpoint whose streak grows; one missing was clear and stays so).
    Returns the streaks that changed, in id order, and those still failing."""
    updates: list[tuple[str, EndpointHealth]] = []
    failing: dict[str, EndpointHealth] = {}
    for change in sorted(changes, key=lambda c: c.subscription_id):
        prior = priors.get(change.subscription_id)
        if prior is None:
            continue
        after = change.applied_to(prior)
        if after != prior:
            updates.append((change.subscription_id, after))
        if after.consecutive_failures:
            failing[change.subscription_id] = after
    return updates, failing
