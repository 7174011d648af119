"""The `destinations` table (migration 0006) and flow control's reads and writes of deliveries
(service_layer/flow_ports.py). Every statement names the tenant: a tenant's policy or state
never applies to another tenant's deliveries, even to the same host:port.

Claims of one destination take turns (PostgreSQL: a transaction-level advisory lock per
(tenant, destination), taken in key order, so two claimers never wait on each other in a
cycle) and count the tenant's leased deliveries (`ix_webhook_deliveries_leased`) after the lock:
a claim committed by another replica is seen, one under way waits. The leased deliveries carry
no destination: it is their subscription's URL's `host:port` (`webhookdeliver.endpoint_key`),
worked out here from the few leased rows. SQLite has one writer, which serialises the claims.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from notification.adapters.tables import (
    DUE_STATUSES_SQL,
    LEASED_SQL,
    destinations,
    subscriptions,
    webhook_deliveries,
)
from notification.domain.destinations import DELETED, HELD, UPDATED, DestinationEvent
from notification.service_layer.flow_ports import Deferral, DestinationRecord, Key, StateChange
from servicekit.data.columns import UTCDateTime
from servicekit.data.database import asyncpg_connection
from servicekit.flow import DestinationPolicy, FlowState
from webhookdeliver import endpoint_key

# FlowState's columns, with their PostgreSQL types (the gate read's NULLs are typed).
_STATE_TYPES = {
    "held_until": "timestamptz",
    "current_rate": "float8",
    "rate_at": "timestamptz",
    "cut_at": "timestamptz",
    "cut_from": "float8",
    "tokens": "float8",
    "tokens_at": "timestamptz",
}
_STATE_COLUMNS = tuple(_STATE_TYPES)
_T = destinations
_D = webhook_deliveries
_S = subscriptions
# The claim's turns per destination: the two-int advisory lock space, this namespace apart
# (sql_store.SUBSCRIPTIONS_LOCK_NAMESPACE is another; the scheduler's 0x0F10 is in its own
# database).
DESTINATION_LOCK_NAMESPACE = 0x0F11
_LOCK_PG = (
    "SELECT pg_advisory_xact_lock($1::int, k) FROM unnest($2::int[]) WITH ORDINALITY"
    " AS t(k, n) ORDER BY n"
)
# One read whose snapshot is taken after the locks (READ COMMITTED): each key's record (locked:
# a reaction may be writing its state), then the tenants' deliveries leased to other claims, per
# subscription URL (`w` tells the two kinds apart).
_GATE_READ_PG = f"""
WITH k AS (SELECT * FROM unnest($1::text[], $2::text[]) AS k(t, d)),
locked AS (
  SELECT destinations.* FROM destinations JOIN k
    ON destinations.tenant_id = k.t AND destinations.destination = k.d
  ORDER BY destinations.tenant_id, destinations.destination
  FOR UPDATE OF destinations
)
SELECT true AS w, tenant_id, destination, NULL::text AS url, 0::bigint AS n, configured,
  max_in_flight, per_second, {", ".join(_STATE_COLUMNS)}
FROM locked
UNION ALL
SELECT false, d.tenant_id, NULL, s.url, count(*), NULL, NULL, NULL,
  {", ".join(f"NULL::{t}" for t in _STATE_TYPES.values())}
FROM webhook_deliveries d JOIN subscriptions s ON s.id = d.subscription_id
WHERE d.{LEASED_SQL} AND d.tenant_id = ANY($3::text[]) AND d.lease_owner <> $4
  AND d.lease_expires_at >= $5
GROUP BY d.tenant_id, s.url
"""  # noqa: S608 (only this module's constants are formatted in)


def lock_key(tenant_id: str, destination: str) -> int:
    digest = hashlib.blake2b(f"{tenant_id}\x00{destination}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def _record(m: Any) -> DestinationRecord:
    policy = DestinationPolicy(m["max_in_flight"], m["per_second"]) if m["configured"] else None
    return DestinationRecord(policy, FlowState(**{c: m[c] for c in _STATE_COLUMNS}))


def _keyed(keys: Sequence[Key]) -> sa.ColumnElement[bool]:
    return sa.or_(*(sa.and_(_T.c.tenant_id == t, _T.c.destination == d) for t, d in keys))


def _in_flight(rows: Sequence[tuple[str, str, int]], keys: Sequence[Key]) -> dict[Key, int]:
    wanted = set(keys)
    counts: dict[Key, int] = {}
    for tenant_id, url, n in rows:
        key = (tenant_id, endpoint_key(url))
        if key in wanted:
            counts[key] = counts.get(key, 0) + int(n)
    return counts


async def _lock_records(conn: AsyncConnection, keys: Sequence[Key]) -> dict[Key, DestinationRecord]:
    q = sa.select(_T).where(_keyed(keys)).order_by(_T.c.tenant_id, _T.c.destination)
    if conn.dialect.name == "postgresql":
        q = q.with_for_update()
    return {
        (r["tenant_id"], r["destination"]): _record(r) for r in (await conn.execute(q)).mappings()
    }


async def _save_states(
    conn: AsyncConnection, states: Mapping[Key, FlowState], now: datetime
) -> None:
    if not states:
        return
    rows = [
        {
            "tenant_id": t,
            "destination": d,
            "configured": False,
            "updated_at": now,
            **{c: getattr(s, c) for c in _STATE_COLUMNS},
        }
        for (t, d), s in sorted(states.items())
    ]
    insert = _dialect_insert(conn)
    update = {c: insert.excluded[c] for c in (*_STATE_COLUMNS, "updated_at")}
    stmt = insert.on_conflict_do_update(
        index_elements=[_T.c.tenant_id, _T.c.destination], set_=update
    )
    await conn.execute(stmt, rows)


def _dialect_insert(conn: AsyncConnection) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(_T)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(_T)


class SqlClaimFlow:
    """`ClaimFlow` on the claim's connection (its transaction)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def with_rows(self, keys: Sequence[Key]) -> set[Key]:
        if not keys:
            return set()
        q = sa.select(_T.c.tenant_id, _T.c.destination).where(_keyed(keys))
        return {(str(t), str(d)) for t, d in await self.conn.execute(q)}

    async def lock_for_claim(
        self, keys: Sequence[Key], owner: str, now: datetime
    ) -> tuple[dict[Key, DestinationRecord], dict[Key, int]]:
        keys = sorted(set(keys))
        if not keys:
            return {}, {}
        tenants = sorted({t for t, _ in keys})
        if self.conn.dialect.name != "postgresql":  # one writer: the claims are serialised
            q = (
                sa.select(_D.c.tenant_id, _S.c.url, sa.func.count())
                .join(_S, _S.c.id == _D.c.subscription_id)
                .where(
                    sa.text(f"webhook_deliveries.{LEASED_SQL}"),
                    _D.c.tenant_id.in_(tenants),
                    _D.c.lease_owner != owner,
                    _D.c.lease_expires_at >= now,
                )
                .group_by(_D.c.tenant_id, _S.c.url)
            )
            rows = [(str(t), str(u), int(n)) for t, u, n in await self.conn.execute(q)]
            return await _lock_records(self.conn, keys), _in_flight(rows, keys)
        db = await asyncpg_connection(self.conn)
        await db.execute(_LOCK_PG, DESTINATION_LOCK_NAMESPACE, sorted({lock_key(*k) for k in keys}))
        fetched = await db.fetch(
            _GATE_READ_PG, [t for t, _ in keys], [d for _, d in keys], tenants, owner, now
        )
        records = {(r["tenant_id"], r["destination"]): _record(r) for r in fetched if r["w"]}
        leased = [(r["tenant_id"], r["url"], r["n"]) for r in fetched if not r["w"]]
        return records, _in_flight(leased, keys)

    async def save_states(self, states: Mapping[Key, FlowState], now: datetime) -> None:
        await _save_states(self.conn, states, now)

    async def defer(self, deferrals: Sequence[Deferral]) -> None:
        if not deferrals:
            return
        # Unattempted: the status, the attempt counts and the retry round stay as they are.
        stmt = (
            sa.update(_D)
            .where(_D.c.id == sa.bindparam("b_id"), _D.c.lease_owner == sa.bindparam("b_owner"))
            .values(
                lease_owner=None,
                lease_expires_at=None,
                next_attempt_at=sa.bindparam("b_due", type_=UTCDateTime()),
            )
        )
        params = [
            {"b_id": d.delivery_id, "b_owner": d.owner, "b_due": d.due_at}
            for d in sorted(deferrals, key=lambda d: d.delivery_id)  # id order, as every writer
        ]
        await self.conn.execute(stmt, params)


class SqlDestinationStore:
    """`DestinationStore`: the reactions to answers and the scheduler's events."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def update_states(self, keys: Sequence[Key], change: StateChange, now: datetime) -> None:
        async with self.engine.begin() as conn:
            records = await _lock_records(conn, sorted(set(keys)))
            await _save_states(conn, change(records), now)

    async def wake(self, delivery_ids: Sequence[str], now: datetime) -> int:
        if not delivery_ids:
            return 0
        at = sa.literal(now, UTCDateTime())
        stmt = (
            sa.update(_D)
            .where(
                _D.c.id.in_(sorted(delivery_ids)),  # id order, as every writer
                _D.c.lease_owner.is_(None),
                sa.text(f"webhook_deliveries.{DUE_STATUSES_SQL}"),
                _D.c.next_attempt_at > at,
            )
            .values(next_attempt_at=at)
        )
        async with self.engine.begin() as conn:
            return int((await conn.execute(stmt)).rowcount)

    async def apply_events(self, events: Sequence[DestinationEvent], now: datetime) -> int:
        """In event order. A policy older than the copy's (`policy_at`) is ignored; a hold
        only lengthens the copy's."""
        changed = 0
        async with self.engine.begin() as conn:
            for e in sorted(events, key=lambda e: (e.tenant_id, e.destination, e.time)):
                changed += await self._apply(conn, e, now)
        return changed

    async def _apply(self, conn: AsyncConnection, e: DestinationEvent, now: datetime) -> int:
        insert = _dialect_insert(conn)
        if e.type == HELD:
            assert e.held_until is not None
            if e.held_until <= now:
                return 0
            values = {"configured": False, "held_until": e.held_until, "updated_at": now}
            held = insert.excluded.held_until
            stmt = insert.values(tenant_id=e.tenant_id, destination=e.destination, **values)
            stmt = stmt.on_conflict_do_update(
                index_elements=[_T.c.tenant_id, _T.c.destination],
                set_={"held_until": held, "updated_at": now},
                where=sa.or_(_T.c.held_until.is_(None), _T.c.held_until < held),
            )
            return 1 if (await conn.execute(stmt)).rowcount else 0
        if e.type == UPDATED:
            assert e.policy is not None
            policy = {
                "configured": True,
                "max_in_flight": e.policy.max_in_flight,
                "per_second": e.policy.per_second,
            }
        elif e.type == DELETED:
            policy = {"configured": False, "max_in_flight": None, "per_second": None}
        else:
            return 0
        # The token bucket starts over under a new policy (as the scheduler's PUT does).
        values = {**policy, "policy_at": e.time, "tokens": None, "tokens_at": None}
        stmt = insert.values(
            tenant_id=e.tenant_id, destination=e.destination, updated_at=now, **values
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=[_T.c.tenant_id, _T.c.destination],
            set_={**values, "updated_at": now},
            where=sa.or_(_T.c.policy_at.is_(None), _T.c.policy_at < e.time),
        )
        return 1 if (await conn.execute(stmt)).rowcount else 0


__all__ = ["DESTINATION_LOCK_NAMESPACE", "SqlClaimFlow", "SqlDestinationStore", "lock_key"]
