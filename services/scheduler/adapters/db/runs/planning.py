"""The planner's queries: due schedules locked for a pass, the overlap check, run inserts,
next_run_at updates, the planner's sleep probe and the max_runs_per_day counts (runs by the UTC
day they were created, off `ix_runs_tenant_created`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from scheduler.adapters.db.repository import DEFINITION_COLUMNS, definition_from_row
from scheduler.adapters.db.runs.base import RunSql
from scheduler.adapters.db.runs.rows import as_datetime, run_to_row
from scheduler.adapters.db.tables import (
    ACTIVE_LIVE_SQL,
    COUNTED_SQL,
    UNFINISHED_LIVE_SQL,
    runs,
    schedules,
)
from scheduler.domain.run import Run
from scheduler.service_layer.run_ports import PlanUpdate, ScheduleToPlan
from servicekit.data.database import asyncpg_connection

# Advisory locks of max_runs_per_day, (namespace, key) in the two-int space: apart from the
# relay's single bigint. Two tenant-days sharing a 32-bit key only wait for each other. A count
# takes one per tenant (the day being counted: the day its runs are created in), whatever the
# occurrences' range, so a transaction holds at most a batch's tenants of them.
QUOTA_DAY_LOCK_NAMESPACE = 0x51D0
# In ascending key order, one statement: the order every counter takes them in.
_LOCK_QUOTA_DAYS = sa.text(
    "SELECT pg_advisory_xact_lock(:namespace, k) FROM unnest(CAST(:keys AS int[])) AS k ORDER BY k"
)


def quota_day_key(tenant_id: str, day_start: datetime) -> int:
    """The advisory lock key (int4) of a tenant's quota day."""
    digest = hashlib.blake2b(f"{tenant_id}\0{day_start.isoformat()}".encode(), digest_size=4)
    return int.from_bytes(digest.digest(), "big", signed=True)


_SET_NEXT_PG = """
UPDATE schedules SET next_run_at = u.next, planned_runs = schedules.planned_runs + u.planned
FROM unnest($1::text[], $2::timestamptz[], $3::int[]) AS u(id, next, planned)
WHERE schedules.id = u.id
"""


class PlannerQueries(RunSql):
    async def lock_due_schedules(self, horizon: datetime, limit: int) -> list[ScheduleToPlan]:
        q = (
            sa.select(
                schedules.c.id,
                schedules.c.tenant_id,
                schedules.c.next_run_at,
                schedules.c.planned_runs,
                schedules.c.version,
                *DEFINITION_COLUMNS,
            )
            .where(sa.text(ACTIVE_LIVE_SQL))
            .where(schedules.c.next_run_at <= horizon)
            .order_by(schedules.c.next_run_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        result = await self.conn.execute(q)
        keys = list(result.keys())
        # Plain dicts: a key lookup in one costs a sixth of a RowMapping's (a thousand rows a pass).
        rows = [dict(zip(keys, r, strict=True)) for r in result]
        return [
            ScheduleToPlan(
                id=m["id"],
                tenant_id=m["tenant_id"],
                definition=definition_from_row(m),
                next_run_at=m["next_run_at"],
                planned_runs=m["planned_runs"],
                version=m["version"],
            )
            for m in rows
        ]

    async def unfinished_schedule_ids(self, schedule_ids: Sequence[str]) -> set[str]:
        if not schedule_ids:
            return set()
        q = (
            sa.select(runs.c.schedule_id)
            .where(self._in(runs.c.schedule_id, list(schedule_ids)))
            # ix_runs_schedule_unfinished (a backfill never holds up a plan)
            .where(sa.text(UNFINISHED_LIVE_SQL))
            .distinct()
        )
        return {r[0] for r in await self.conn.execute(q)}

    async def insert_runs(self, new_runs: Sequence[Run]) -> int:
        return len(await self.insert_new_runs(new_runs))

    async def insert_new_runs(self, new_runs: Sequence[Run]) -> set[str]:
        if not new_runs:
            return set()
        # RETURNING lists only the rows ON CONFLICT DO NOTHING kept (PostgreSQL; SQLite >= 3.35).
        stmt = self._insert(runs).on_conflict_do_nothing().returning(runs.c.id)
        result = await self.conn.execute(stmt, [run_to_row(r) for r in new_runs])
        return {str(i) for (i,) in result.all()}

    async def set_next_run_at(self, updates: Sequence[PlanUpdate]) -> None:
        if not updates:
            return
        if self.is_postgres:
            # One statement for the pass (a herd is thousands of schedules), id order: two
            # passes never wait on each other in a cycle.
            ordered = sorted(updates, key=lambda u: u.schedule_id)
            db = await asyncpg_connection(self.conn)
            await db.execute(
                _SET_NEXT_PG,
                [u.schedule_id for u in ordered],
                [u.next_run_at for u in ordered],
                [u.planned for u in ordered],
            )
            return
        stmt = (
            sa.update(schedules)
            .where(schedules.c.id == sa.bindparam("b_id"))
            .values(
                next_run_at=sa.bindparam("b_next"),
                planned_runs=schedules.c.planned_runs + sa.bindparam("b_planned", type_=sa.Integer),
            )
        )
        await self.conn.execute(
            stmt,
            [
                {"b_id": u.schedule_id, "b_next": u.next_run_at, "b_planned": u.planned}
                for u in updates
            ],
        )

    async def next_schedule_due_at(self) -> datetime | None:
        # ORDER BY ... LIMIT 1, not min(): with stale statistics PostgreSQL aggregated min()
        # over every active schedule (10,000 index entries, 5-9 ms per planner sleep).
        q = (
            sa.select(schedules.c.next_run_at)
            .where(sa.text(ACTIVE_LIVE_SQL))
            .where(schedules.c.next_run_at.is_not(None))
            .order_by(schedules.c.next_run_at)
            .limit(1)
        )
        return as_datetime((await self.conn.execute(q)).scalar())

    async def count_runs_by_tenant(
        self, tenant_ids: Sequence[str], start: datetime, end: datetime
    ) -> dict[str, int]:
        if not tenant_ids:
            return {}
        if self.is_postgres:
            keys = sorted({quota_day_key(t, start) for t in tenant_ids})
            await self.conn.execute(
                _LOCK_QUOTA_DAYS, {"namespace": QUOTA_DAY_LOCK_NAMESPACE, "keys": keys}
            )
        q = (
            sa.select(runs.c.tenant_id, sa.func.count())
            .where(
                runs.c.tenant_id.in_(sorted(set(tenant_ids))),
                runs.c.created_at >= start,
                runs.c.created_at < end,
                # ix_runs_tenant_created's predicate, as a literal (module docstring of tables)
                sa.text(COUNTED_SQL),
            )
            .group_by(runs.c.tenant_id)
        )
        return {str(t): int(n) for t, n in (await self.conn.execute(q)).all()}
