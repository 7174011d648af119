"""`DeliveryStore` on SQLAlchemy Core: the dispatcher's leases on `webhook_deliveries` and the
compare-and-set that writes finished attempts. One transaction per method.

A claim sets `lease_owner` (one token per claim) and `lease_expires_at` on due deliveries of
live, enabled subscriptions. PostgreSQL: one statement, `UPDATE ... FROM (SELECT ... FOR UPDATE
SKIP LOCKED LIMIT n) RETURNING` joined to the subscriptions, so replicas take disjoint
deliveries without waiting on each other. SQLite (one writer at a time): the UPDATE with its
RETURNING, then the subscriptions.

A completion is written only while its delivery is still due and leased to the completion's
owner; the others are dropped (their lease expired and another claim took them, or a replay
reset them), so an attempt number is never written twice. PostgreSQL writes the deliveries and
their attempts in one statement (`_COMPLETE_PG`), SQLite row by row. Either way the endpoint
streaks of the written attempts follow in the same transaction, their rows locked in id order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from notification.adapters.sql_store import SUBSCRIPTION_COLUMNS, subscription_record
from notification.adapters.tables import (
    DUE_STATUSES_SQL,
    delivery_attempts,
    subscriptions,
    webhook_deliveries,
)
from notification.domain.deliveries import (
    DUE_STATES,
    DeliveryStatus,
    EndpointHealth,
    StreakChange,
    streak_changes,
)
from notification.service_layer.ports import (
    ClaimedDelivery,
    CompletionReport,
    DeliveryCompletion,
    SubscriptionRecord,
)

_DUE = [s.value for s in DUE_STATES]
_TERMINAL = (DeliveryStatus.SUCCEEDED.value, DeliveryStatus.DEAD.value)
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
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[ClaimedDelivery]:
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
        lease = {"lease_owner": owner, "lease_expires_at": lease_until}
        rows: Sequence[Mapping[Any, Any]]
        async with self.engine.begin() as conn:
            if self._postgres:
                await conn.execute(_INDEX_PATHS_ONLY)
                picked = due.with_for_update(of=_D, skip_locked=True).cte("picked")
                claimed = (
                    update(_D)
                    .where(_D.c.id == picked.c.id)
                    .values(**lease)
                    .returning(*_CLAIMED_COLUMNS)
                    .cte("claimed")
                )
                query = select(
                    claimed.c.id.label("d_id"),
                    *(claimed.c[c.name] for c in _CLAIMED_COLUMNS[2:]),
                    *SUBSCRIPTION_COLUMNS,
                ).join(_S, _S.c.id == claimed.c.subscription_id)
                rows = (await conn.execute(query)).mappings().all()
            else:
                stmt = (
                    update(_D)
                    .where(_D.c.id.in_(due.scalar_subquery()))
                    .values(**lease)
                    .returning(*_CLAIMED_COLUMNS)
                )
                leased = (await conn.execute(stmt)).mappings().all()
                if not leased:
                    return []
                sub_ids = sorted({r["subscription_id"] for r in leased})
                subs = {
                    r["id"]: r
                    for r in (
                        await conn.execute(
                            select(*SUBSCRIPTION_COLUMNS).where(_S.c.id.in_(sub_ids))
                        )
                    ).mappings()
                }
                # The subscription's columns go last: `id` is the subscription's, as on PostgreSQL.
                rows = [{**r, **subs[r["subscription_id"]], "d_id": r["id"]} for r in leased]
        return [
            ClaimedDelivery(
                id=r["d_id"],
                tenant_id=r["tenant_id"],
                event_type=r["event_type"],
                body=bytes(r["body"]),
                attempt_count=r["attempt_count"],
                round_attempts=r["round_attempts"],
                round_started_at=r["round_started_at"],
                subscription=subscription_record(r),
            )
            for r in rows
        ]

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
                written = await self._write_owned_pg(conn, completions, now)
            else:
                written = await self._write_owned_sqlite(conn, completions, now)
            changes = streak_changes(
                (c.subscription_id, c.ok, c.attempt.started_at)
                for c in completions
                if c.delivery_id in written
            )
            failing = await self._apply_streaks(conn, changes)
        return CompletionReport(written, failing)

    async def _write_owned_pg(
        self, conn: AsyncConnection, completions: Sequence[DeliveryCompletion], now: datetime
    ) -> set[str]:
        rows = [
            (
                c.delivery_id,
                c.owner,
                c.status,
                c.next_attempt_at,
                c.round_started_at,
                c.last_error,
                now if c.status in _TERMINAL else None,
                c.attempt.number,
                c.attempt.started_at,
                c.attempt.duration_ms,
                c.attempt.status_code,
                c.attempt.error_kind,
                c.attempt.error_message,
                c.attempt.response_excerpt,
            )
            for c in sorted(completions, key=lambda c: c.delivery_id)
        ]
        params: dict[str, Any] = dict(
            zip(_COMPLETE_PARAMS, map(list, zip(*rows, strict=True)), strict=True)
        )
        params["now"] = now
        result = await conn.execute(_COMPLETE_PG, params)
        return {row[0] for row in result}

    async def _write_owned_sqlite(
        self, conn: AsyncConnection, completions: Sequence[DeliveryCompletion], now: datetime
    ) -> set[str]:
        written: set[str] = set()
        for c in sorted(completions, key=lambda c: c.delivery_id):
            stmt = (
                update(_D)
                .where(
                    _D.c.id == c.delivery_id,
                    _D.c.lease_owner == c.owner,
                    _D.c.status.in_(_DUE),
                )
                .values(
                    status=c.status,
                    attempt_count=_D.c.attempt_count + 1,
                    round_attempts=_D.c.round_attempts + 1,
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
            {"delivery_id": c.delivery_id, **_attempt_values(c)}
            for c in completions
            if c.delivery_id in written
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
        by_id = {c.subscription_id: c for c in changes}
        growing = [c.subscription_id for c in changes if not c.clears]
        query = (
            select(_S.c.id, _S.c.failing_since, _S.c.consecutive_failures)
            .where(
                _S.c.id.in_(sorted(by_id)),
                or_(
                    _S.c.id.in_(growing),
                    _S.c.consecutive_failures > 0,
                    _S.c.failing_since.is_not(None),
                ),
            )
            .order_by(_S.c.id)
        )
        if self._postgres:
            query = query.with_for_update(of=_S)
        updates: list[dict[str, Any]] = []
        failing: dict[str, EndpointHealth] = {}
        for row in (await conn.execute(query)).mappings():
            prior = EndpointHealth(row["failing_since"], row["consecutive_failures"])
            after = by_id[row["id"]].applied_to(prior)
            if after != prior:
                updates.append(
                    {
                        "b_id": row["id"],
                        "failing_since": after.failing_since,
                        "consecutive_failures": after.consecutive_failures,
                    }
                )
            if after.consecutive_failures:
                failing[row["id"]] = after
        if updates:
            await conn.execute(update(_S).where(_S.c.id == bindparam("b_id")), updates)
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


def _attempt_values(c: DeliveryCompletion) -> dict[str, Any]:
    a = c.attempt
    return {
        "number": a.number,
        "started_at": a.started_at,
        "duration_ms": a.duration_ms,
        "status_code": a.status_code,
        "error_kind": a.error_kind,
        "error_message": a.error_message,
        "response_excerpt": a.response_excerpt,
    }


# For the claim's transaction only: walk the due index in order and look subscriptions up by
# primary key. Statistics are stale in exactly the case that matters (a burst of new due
# deliveries), and with them the planner would otherwise bitmap-scan and sort EVERY due row on
# each claim (~100x slower at 10,000 due).
_INDEX_PATHS_ONLY = text(
    "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)"
)

# The completion write on PostgreSQL, one round trip. Each column is an array parameter, so the
# SQL is the same for every batch (asyncpg prepares it once per connection). `locked` locks, in
# id order, the deliveries still due and leased to the completion's owner; `written` stores
# their state (its WHERE re-checks the lease on the newest row version); attempts are inserted
# for the written deliveries only, so an attempt number can never be written twice.
_COMPLETE_PG = text(
    """
WITH v AS (
  SELECT * FROM unnest(
    CAST(:c_id AS text[]), CAST(:c_owner AS text[]), CAST(:c_status AS text[]),
    CAST(:c_next_attempt_at AS timestamptz[]), CAST(:c_round_started_at AS timestamptz[]),
    CAST(:c_last_error AS text[]), CAST(:c_finished_at AS timestamptz[]),
    CAST(:c_number AS int[]), CAST(:c_started_at AS timestamptz[]),
    CAST(:c_duration_ms AS int[]), CAST(:c_status_code AS int[]),
    CAST(:c_error_kind AS text[]), CAST(:c_error_message AS text[]),
    CAST(:c_response_excerpt AS text[])
  ) AS v(id, owner, status, next_attempt_at, round_started_at, last_error, finished_at,
         number, started_at, duration_ms, status_code, error_kind, error_message,
         response_excerpt)
),
locked AS (
  SELECT d.id FROM webhook_deliveries d JOIN v ON v.id = d.id
  WHERE d.lease_owner = v.owner AND d.status IN ('pending', 'retrying')
  ORDER BY d.id
  FOR UPDATE OF d
),
written AS (
  UPDATE webhook_deliveries d SET status = v.status, attempt_count = d.attempt_count + 1,
    round_attempts = d.round_attempts + 1, round_started_at = v.round_started_at,
    next_attempt_at = v.next_attempt_at, lease_owner = NULL, lease_expires_at = NULL,
    last_error = v.last_error, updated_at = :now, finished_at = v.finished_at
  FROM v
  WHERE d.id = v.id AND d.id IN (SELECT id FROM locked)
    AND d.lease_owner = v.owner AND d.status IN ('pending', 'retrying')
  RETURNING d.id
),
attempts_in AS (
  INSERT INTO delivery_attempts (delivery_id, number, started_at, duration_ms, status_code,
    error_kind, error_message, response_excerpt)
  SELECT v.id, v.number, v.started_at, v.duration_ms, v.status_code, v.error_kind,
    v.error_message, v.response_excerpt
  FROM v WHERE v.id IN (SELECT id FROM written)
)
SELECT id FROM written
"""
)
_COMPLETE_PARAMS = tuple(
    "c_" + name
    for name in (
        "id",
        "owner",
        "status",
        "next_attempt_at",
        "round_started_at",
        "last_error",
        "finished_at",
        "number",
        "started_at",
        "duration_ms",
        "status_code",
        "error_kind",
        "error_message",
        "response_excerpt",
    )
)
