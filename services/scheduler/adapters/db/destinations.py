"""The `destinations` table (migration 0017) and flow control's reads and writes of runs
(service_layer/flow_ports.py). Every statement names the tenant: a tenant's policy or state
never applies to another tenant's runs, even to the same host:port.

Claims of one destination take turns (PostgreSQL: a transaction-level advisory lock per
(tenant, destination), taken in key order, so two claimers never wait on each other in a cycle)
and count the destination's leased runs through `ix_runs_destination_leased` after the lock:
a claim committed by another worker is seen, one under way waits. SQLite has one writer, which
serialises the claims already."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from scheduler.adapters.db.dialect import dialect_insert, rowcount
from scheduler.adapters.db.tables import (
    LEASED_RECHECK_SQL,
    LEASED_SQL,
    LIVE_DUE_SQL,
    destinations,
    runs,
    schedules,
)
from scheduler.adapters.db.types import UTCDateTime
from scheduler.domain.run import RunStatus
from scheduler.service_layer.flow_ports import Deferral, DestinationRecord, Key
from servicekit.data.database import asyncpg_connection
from servicekit.flow import DestinationPolicy, FlowState

_STATE_COLUMNS = (
    "held_until",
    "current_rate",
    "rate_at",
    "cut_at",
    "cut_from",
    "tokens",
    "tokens_at",
)
# The claim's turns per destination: the two-int advisory lock space, this namespace apart
# (repository.TENANT_SCHEDULES_LOCK_NAMESPACE is another).
DESTINATION_LOCK_NAMESPACE = 0x0F10
# The claim's gate on asyncpg directly (constant SQL, prepared once per connection; no
# SQLAlchemy compile of a per-batch OR of keys): the locks, then ONE read whose snapshot is taken
# after them (READ COMMITTED: a claim of these destinations committed meanwhile is seen) of each
# key's row (locked: a reaction may be writing its state) and its leased runs of other claims.
_LOCK_PG = (
    "SELECT pg_advisory_xact_lock($1::int, k) FROM unnest($2::int[]) WITH ORDINALITY"
    " AS t(k, n) ORDER BY n"
)
_GATE_COLUMNS = ("configured", "max_in_flight", "per_second", "updated_at")
_GATE_READ_PG = f"""
WITH k AS (SELECT * FROM unnest($1::text[], $2::text[]) AS k(t, d)),
locked AS (
  SELECT destinations.* FROM destinations JOIN k
    ON destinations.tenant_id = k.t AND destinations.destination = k.d
  ORDER BY destinations.tenant_id, destinations.destination
  FOR UPDATE OF destinations
)
SELECT k.t AS tenant_id, k.d AS destination, locked.tenant_id IS NOT NULL AS found,
  {", ".join(f"locked.{c}" for c in (*_GATE_COLUMNS, *_STATE_COLUMNS))},
  (SELECT count(*) FROM runs WHERE {LEASED_SQL} AND runs.tenant_id = k.t
     AND runs.destination = k.d AND runs.lease_owner IS NOT NULL
     AND runs.lease_owner <> $3::text) AS in_flight
FROM k LEFT JOIN locked ON locked.tenant_id = k.t AND locked.destination = k.d
"""  # noqa: S608 (only this module's constants are formatted in)
# Which of a claim's destinations have a row (a policy or a state): one index probe each.
_WITH_ROWS_PG = """
SELECT d.tenant_id, d.destination FROM unnest($1::text[], $2::text[]) AS k(t, d)
JOIN destinations d ON d.tenant_id = k.t AND d.destination = k.d
"""
# How many pending runs one hold moves per statement (a tenant's backlog to one destination is
# bounded by its quotas; the rest meet the hold at their claim).
HOLD_BATCH = 10_000


def lock_key(tenant_id: str, destination: str) -> int:
    digest = hashlib.blake2b(f"{tenant_id}\x00{destination}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def _record(m: Any) -> DestinationRecord:
    policy = DestinationPolicy(m["max_in_flight"], m["per_second"]) if m["configured"] else None
    state = FlowState(**{c: m[c] for c in _STATE_COLUMNS})
    return DestinationRecord(m["tenant_id"], m["destination"], policy, state, m["updated_at"])


class SqlDestinationRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self.is_postgres = conn.dialect.name == "postgresql"

    def _keyed(self, keys: Sequence[Key]) -> sa.ColumnElement[bool]:
        return sa.or_(
            *(
                sa.and_(destinations.c.tenant_id == t, destinations.c.destination == d)
                for t, d in keys
            )
        )

    # ---- the API -------------------------------------------------------------------------

    async def get(self, tenant_id: str, destination: str) -> DestinationRecord | None:
        q = sa.select(destinations).where(self._keyed([(tenant_id, destination)]))
        row = (await self.conn.execute(q)).first()
        return None if row is None else _record(row._mapping)

    async def list(
        self, tenant_id: str, *, after: str | None, limit: int
    ) -> list[DestinationRecord]:
        q = sa.select(destinations).where(destinations.c.tenant_id == tenant_id)
        if after is not None:
            q = q.where(destinations.c.destination > after)
        q = q.order_by(destinations.c.destination).limit(limit)
        return [_record(r._mapping) for r in await self.conn.execute(q)]

    async def count_configured(self, tenant_id: str) -> int:
        q = (
            sa.select(sa.func.count())
            .select_from(destinations)
            .where(destinations.c.tenant_id == tenant_id, destinations.c.configured)
        )
        return int((await self.conn.execute(q)).scalar_one())

    async def put_policy(
        self, tenant_id: str, destination: str, policy: DestinationPolicy, now: datetime
    ) -> bool:
        values = {
            "configured": True,
            "max_in_flight": policy.max_in_flight,
            "per_second": policy.per_second,
            "updated_at": now,
        }
        stmt = (
            sa.update(destinations)
            .where(self._keyed([(tenant_id, destination)]))
            .values(**values, tokens=None, tokens_at=None)
        )
        if rowcount(await self.conn.execute(stmt)):
            return False
        insert = dialect_insert(self.conn, destinations).values(
            tenant_id=tenant_id, destination=destination, created_at=now, **values
        )
        await self.conn.execute(insert.on_conflict_do_nothing())
        return True

    async def delete_policy(self, tenant_id: str, destination: str, now: datetime) -> bool:
        where = self._keyed([(tenant_id, destination)])
        stmt = (
            sa.update(destinations)
            .where(where, destinations.c.configured)
            .values(configured=False, max_in_flight=None, per_second=None, updated_at=now)
        )
        found = rowcount(await self.conn.execute(stmt)) > 0
        # A row with no state left has nothing to show.
        await self.conn.execute(
            sa.delete(destinations).where(
                where,
                sa.not_(destinations.c.configured),
                destinations.c.current_rate.is_(None),
                sa.or_(destinations.c.held_until.is_(None), destinations.c.held_until <= now),
            )
        )
        return found

    # ---- the dispatcher --------------------------------------------------------------------

    async def in_flight(self, keys: Sequence[Key], *, excluding_owner: str = "") -> dict[Key, int]:
        if not keys:
            return {}
        pairs = sa.or_(*(sa.and_(runs.c.tenant_id == t, runs.c.destination == d) for t, d in keys))
        q = (
            sa.select(runs.c.tenant_id, runs.c.destination, sa.func.count())
            .where(sa.text(LEASED_SQL))  # ix_runs_destination_leased's predicate
            # A run awaiting its completion call is in_progress without a lease: the request
            # ended when the receiver accepted it, so it holds no slot of the destination.
            .where(runs.c.lease_owner.is_not(None))
            .where(pairs)
            .group_by(runs.c.tenant_id, runs.c.destination)
        )
        if excluding_owner:
            q = q.where(runs.c.lease_owner != excluding_owner)
        return {(str(t), str(d)): int(n) for t, d, n in await self.conn.execute(q)}

    async def with_rows(self, keys: Sequence[Key]) -> set[Key]:
        if not keys:
            return set()
        if self.is_postgres:
            db = await asyncpg_connection(self.conn)
            found = await db.fetch(_WITH_ROWS_PG, [t for t, _ in keys], [d for _, d in keys])
        else:
            q = sa.select(destinations.c.tenant_id, destinations.c.destination)
            found = list(await self.conn.execute(q.where(self._keyed(keys))))
        return {(str(r[0]), str(r[1])) for r in found}

    async def lock_for_claim(
        self, keys: Sequence[Key], owner: str
    ) -> tuple[dict[Key, DestinationRecord], dict[Key, int]]:
        keys = sorted(set(keys))
        if not keys:
            return {}, {}
        if not self.is_postgres:  # one writer: the claims are serialised already
            return await self.lock_for_update(keys), await self.in_flight(
                keys, excluding_owner=owner
            )
        db = await asyncpg_connection(self.conn)
        ordered = sorted({lock_key(t, d) for t, d in keys})
        await db.execute(_LOCK_PG, DESTINATION_LOCK_NAMESPACE, ordered)
        rows = await db.fetch(_GATE_READ_PG, [t for t, _ in keys], [d for _, d in keys], owner)
        records: dict[Key, DestinationRecord] = {}
        counts: dict[Key, int] = {}
        for r in rows:
            key = (r["tenant_id"], r["destination"])
            if r["in_flight"]:
                counts[key] = int(r["in_flight"])
            if r["found"]:
                records[key] = _record(r)
        return records, counts

    async def lock_for_update(self, keys: Sequence[Key]) -> dict[Key, DestinationRecord]:
        keys = sorted(set(keys))
        if not keys:
            return {}
        q = sa.select(destinations).where(self._keyed(keys))
        if self.is_postgres:
            q = q.order_by(destinations.c.tenant_id, destinations.c.destination).with_for_update()
        out: dict[Key, DestinationRecord] = {}
        for row in await self.conn.execute(q):
            rec = _record(row._mapping)
            out[(rec.tenant_id, rec.destination)] = rec
        return out

    async def save_states(self, states: Mapping[Key, FlowState], now: datetime) -> None:
        if not states:
            return
        rows = [
            {
                "tenant_id": t,
                "destination": d,
                "configured": False,
                "created_at": now,
                "updated_at": now,
                **{c: getattr(s, c) for c in _STATE_COLUMNS},
            }
            for (t, d), s in sorted(states.items())
        ]
        insert = dialect_insert(self.conn, destinations)
        update = {c: insert.excluded[c] for c in (*_STATE_COLUMNS, "updated_at")}
        stmt = insert.on_conflict_do_update(
            index_elements=[destinations.c.tenant_id, destinations.c.destination], set_=update
        )
        await self.conn.execute(stmt, rows)

    async def defer_runs(self, deferrals: Sequence[Deferral]) -> int:
        if not deferrals:
            return 0
        # A first attempt that never went out has not started: max_retry_duration_seconds
        # counts from an attempt's start, never from a deferral; a run attempted before counts
        # the time it is kept back now as held, which that duration leaves out.
        stmt = (
            sa.update(runs)
            .where(runs.c.id == sa.bindparam("b_id"))
            .where(runs.c.lease_owner == sa.bindparam("b_owner"))
            .where(sa.text(LEASED_RECHECK_SQL))  # by primary key, whatever the statistics
            .values(
                status=RunStatus.PENDING.value,
                lease_owner=None,
                lease_expires_at=None,
                next_attempt_at=sa.bindparam("b_due", type_=UTCDateTime()),
                started_at=sa.case((runs.c.attempt_count == 0, None), else_=runs.c.started_at),
                held_seconds=_held_plus(sa.bindparam("b_held", type_=sa.Float())),
            )
        )
        params = [
            {"b_id": d.run_id, "b_owner": d.owner, "b_due": d.due_at, "b_held": d.held_seconds}
            for d in sorted(deferrals, key=lambda d: d.run_id)  # id order, as every run write
        ]
        await self.conn.execute(stmt, params)
        return len(params)

    async def wake_runs(self, due: Sequence[tuple[str, datetime]]) -> int:
        if not due:
            return 0
        at = sa.bindparam("b_at", type_=UTCDateTime())
        stmt = (
            sa.update(runs)
            .where(runs.c.id == sa.bindparam("b_id"))
            .where(  # not IN: an expanding parameter cannot go with executemany
                sa.or_(
                    runs.c.status == RunStatus.PENDING.value,
                    runs.c.status == RunStatus.RETRYING.value,
                )
            )
            .where(runs.c.lease_owner.is_(None))
            .where(runs.c.next_attempt_at > at)
            .values(next_attempt_at=at)
        )
        params = [{"b_id": i, "b_at": when} for i, when in sorted(due)]  # id order
        await self.conn.execute(stmt, params)
        return len(params)

    async def hold_pending(self, key: Key, until: datetime, now: datetime) -> int:
        tenant_id, destination = key
        of_destination = (
            sa.select(schedules.c.id)
            .where(schedules.c.tenant_id == tenant_id)
            .where(schedules.c.destination == destination)
        )
        chosen = (
            sa.select(runs.c.id, runs.c.next_attempt_at)
            .where(runs.c.tenant_id == tenant_id)
            .where(sa.text(LIVE_DUE_SQL))
            .where(runs.c.next_attempt_at < until)
            .where(runs.c.schedule_id.in_(of_destination))
            .order_by(runs.c.id)  # id order, as every run write
            .limit(HOLD_BATCH)
            .with_for_update(skip_locked=True)
        )
        rows = (await self.conn.execute(chosen)).all()
        if not rows:
            return 0
        at = sa.bindparam("b_until", type_=UTCDateTime())
        stmt = (
            sa.update(runs)
            .where(runs.c.id == sa.bindparam("b_id"))
            .where(runs.c.next_attempt_at < at)
            .values(
                next_attempt_at=at,
                held_seconds=_held_plus(sa.bindparam("b_held", type_=sa.Float())),
            )
        )
        # Held from when it was due (or now, if it was due before): until the hold's end.
        params = [
            {
                "b_id": r.id,
                "b_until": until,
                "b_held": max((until - max(r.next_attempt_at, now)).total_seconds(), 0.0),
            }
            for r in rows
        ]
        await self.conn.execute(stmt, params)
        return len(params)


def _held_plus(seconds: Any) -> Any:
    """An attempted run's `held_seconds` plus `seconds` (a first attempt's stays null: its
    duration counts from its start, which a deferral leaves unset)."""
    return sa.case(
        (runs.c.attempt_count == 0, runs.c.held_seconds),
        else_=sa.func.coalesce(runs.c.held_seconds, 0.0) + seconds,
    )


__all__ = ["DESTINATION_LOCK_NAMESPACE", "SqlDestinationRepository", "lock_key"]
