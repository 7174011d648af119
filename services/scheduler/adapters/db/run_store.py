"""The SQL RunStore (service_layer/run_ports.py): Core statements on one AsyncConnection per
transaction, set-based on the hot path (a whole claim batch or group of completions per
statement or executemany), portable across PostgreSQL and SQLite.

PostgreSQL: claims are `UPDATE runs ... WHERE id IN (SELECT id ... FOR UPDATE SKIP LOCKED LIMIT n)
RETURNING ...`, so replicas never claim the same run; planners lock due schedules the same way.
A settle (`write_owned`) is one statement: a data-modifying CTE that checks the leases, writes
the runs, inserts attempts and outbox rows for the written runs and resets the breaker count.
SQLite: `FOR UPDATE` is not emitted; the engine's single pooled connection makes every
transaction the only writer; a settle is four multi-row statements (UPDATE ... FROM VALUES
... RETURNING for the lease check and the write, then attempts, outbox, breaker reset).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from scheduler.adapters.db.repository import row_to_schedule
from scheduler.adapters.db.run_tables import (
    DUE_STATUSES_SQL,
    LEASED_SQL,
    UNFINISHED_SQL,
    delivery_attempts,
    runs,
)
from scheduler.adapters.db.tables import outbox, schedules
from scheduler.adapters.db.tenant_store import count_runs_by_tenant
from scheduler.adapters.db.types import UTCDateTime
from scheduler.adapters.db.unit_of_work import outbox_row
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.events import DomainEvent
from scheduler.domain.policies import (
    Action,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
    ScheduleState,
)
from scheduler.domain.run import Attempt, Run, RunStatus, SkipReason, Trigger
from scheduler.domain.schedule import Schedule, Target
from scheduler.service_layer.run_ports import (
    Completion,
    DeliverySpec,
    RunPageFilter,
    RunTx,
    ScheduleToPlan,
)

_T = TypeVar("_T")
_SCHEDULE_COLUMNS = [c for c in schedules.c if not c.name.endswith("secret_ciphertext")]
_ACTIVE_LIVE_SQL = "state = 'active' AND deleted_at IS NULL"  # ix_schedules_due's predicate
# The same runs as DUE_STATUSES_SQL (the six statuses are a closed set), written so PostgreSQL
# cannot prove ix_runs_due's predicate from it: the claim's per-row re-check must go through the
# primary key. With stale statistics (right after a burst of new due runs) the planner otherwise
# chose ix_runs_due for it and scanned every due run once per claimed run (measured: 4,100 rows
# filtered per run, 80 ms per claim of 78 runs during a 10,000-run burst).
# SET LOCAL for both in one round trip (is_local = true: this transaction only).
_INDEX_PATHS_ONLY = sa.text(
    "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)"
)
_DUE_RECHECK_SQL = "status NOT IN ('in_progress', 'succeeded', 'failed', 'skipped')"
# Fair claims rank tenants within the oldest `limit x 8` due runs (at least 200, at most 2,000):
# bounded work per claim (an index range scan of the due index), whatever the backlog.
FAIR_WINDOW_FACTOR = 8
FAIR_WINDOW_MIN = 200
FAIR_WINDOW_MAX = 2000


def run_to_row(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "tenant_id": run.tenant_id,
        "schedule_id": run.schedule_id,
        "scheduled_for": run.scheduled_for,
        "trigger": run.trigger.value,
        "status": run.status.value,
        "skip_reason": None if run.skip_reason is None else run.skip_reason.value,
        "attempt_count": run.attempt_count,
        "next_attempt_at": run.next_attempt_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "lease_owner": run.lease_owner,
        "lease_expires_at": run.lease_expires_at,
        "payload": run.payload,
        "created_at": run.created_at,
    }


def row_to_run(row: Any) -> Run:
    m = row._mapping
    return Run(
        id=m["id"],
        tenant_id=m["tenant_id"],
        schedule_id=m["schedule_id"],
        scheduled_for=m["scheduled_for"],
        trigger=Trigger(m["trigger"]),
        status=RunStatus(m["status"]),
        skip_reason=None if m["skip_reason"] is None else SkipReason(m["skip_reason"]),
        attempt_count=m["attempt_count"],
        next_attempt_at=m["next_attempt_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        created_at=m["created_at"],
        payload=m["payload"],
        lease_owner=m["lease_owner"],
        lease_expires_at=m["lease_expires_at"],
    )


class SqlRunTx(RunTx):
    def __init__(self, conn: AsyncConnection, box: SecretBox) -> None:
        self.conn = conn
        self.box = box
        self.is_postgres = conn.dialect.name == "postgresql"

    def _insert(self, table: sa.Table) -> Any:
        return (pg_dialect.insert if self.is_postgres else sqlite_dialect.insert)(table)

    def _in(self, column: sa.ColumnElement[Any], values: list[Any]) -> sa.ColumnElement[bool]:
        """`column IN values`. PostgreSQL: `column = ANY(:array)`, ONE parameter, so the SQL is
        the same whatever the list's length and asyncpg prepares it once; an expanding IN
        renders a new statement per length, which costs a prepare round trip (and a plan) on
        most hot-path calls, their batch sizes varying."""
        if not self.is_postgres:
            return column.in_(values)
        array = sa.bindparam(None, values, type_=pg_dialect.ARRAY(column.type))
        return column == sa.any_(array)

    # ---- planner -------------------------------------------------------------------------

    async def lock_due_schedules(self, horizon: datetime, limit: int) -> list[ScheduleToPlan]:
        q = (
            sa.select(
                schedules.c.id,
                schedules.c.tenant_id,
                schedules.c.cron,
                schedules.c.timezone,
                schedules.c.misfire_policy,
                schedules.c.overlap_policy,
                schedules.c.next_run_at,
                schedules.c.payload,
            )
            .where(sa.text(_ACTIVE_LIVE_SQL))
            .where(schedules.c.next_run_at <= horizon)
            .order_by(schedules.c.next_run_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        result = await self.conn.execute(q)
        return [
            ScheduleToPlan(
                id=r.id,
                tenant_id=r.tenant_id,
                cron=r.cron,
                timezone=r.timezone,
                misfire_policy=MisfirePolicy(r.misfire_policy),
                overlap_policy=OverlapPolicy(r.overlap_policy),
                next_run_at=r.next_run_at,
                payload=r.payload,
            )
            for r in result
        ]

    async def unfinished_schedule_ids(self, schedule_ids: Sequence[str]) -> set[str]:
        if not schedule_ids:
            return set()
        q = (
            sa.select(runs.c.schedule_id)
            .where(self._in(runs.c.schedule_id, list(schedule_ids)))
            .where(sa.text(UNFINISHED_SQL))
            .distinct()
        )
        return {r[0] for r in await self.conn.execute(q)}

    async def insert_runs(self, new_runs: Sequence[Run]) -> int:
        if not new_runs:
            return 0
        stmt = self._insert(runs).on_conflict_do_nothing().returning(runs.c.id)
        result = await self.conn.execute(stmt, [run_to_row(r) for r in new_runs])
        return len(result.all())

    async def set_next_run_at(self, updates: Sequence[tuple[str, datetime | None]]) -> None:
        if not updates:
            return
        stmt = sa.update(schedules).where(schedules.c.id == sa.bindparam("b_id"))
        await self.conn.execute(stmt, [{"b_id": i, "next_run_at": t} for i, t in updates])

    async def next_schedule_due_at(self) -> datetime | None:
        # ORDER BY ... LIMIT 1, not min(): with stale statistics PostgreSQL aggregated min()
        # over every active schedule (10,000 index entries, 5-9 ms per planner sleep).
        q = (
            sa.select(schedules.c.next_run_at)
            .where(sa.text(_ACTIVE_LIVE_SQL))
            .where(schedules.c.next_run_at.is_not(None))
            .order_by(schedules.c.next_run_at)
            .limit(1)
        )
        return _as_datetime((await self.conn.execute(q)).scalar())

    async def count_runs_by_tenant(
        self, tenant_ids: Sequence[str], start: datetime, end: datetime
    ) -> dict[str, int]:
        return await count_runs_by_tenant(self.conn, tenant_ids, start, end)

    # ---- dispatcher ----------------------------------------------------------------------

    async def claim_due(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[Run]:
        claimed: list[Run] = []
        # Tenant-fair first: among the oldest due runs (a bounded window of the due index), take
        # each tenant's oldest before anyone's second, so one tenant's burst of runs cannot all
        # go before another tenant's. Ranking needs a window function, which cannot carry FOR
        # UPDATE, so the chosen ids are then locked with SKIP LOCKED (and re-checked as due).
        window = (
            sa.select(runs.c.id, runs.c.tenant_id, runs.c.next_attempt_at)
            .where(sa.text(DUE_STATUSES_SQL))
            .where(runs.c.next_attempt_at <= now)
            .order_by(runs.c.next_attempt_at)
            .limit(min(max(limit * FAIR_WINDOW_FACTOR, FAIR_WINDOW_MIN), FAIR_WINDOW_MAX))
            .subquery("w")
        )
        turn = sa.func.row_number().over(
            partition_by=window.c.tenant_id, order_by=(window.c.next_attempt_at, window.c.id)
        )
        ranked = sa.select(window.c.id, window.c.next_attempt_at, turn.label("turn")).subquery("r")
        fair = (
            sa.select(ranked.c.id)
            .order_by(ranked.c.turn, ranked.c.next_attempt_at, ranked.c.id)
            .limit(limit)
        )
        chosen: sa.Select[Any]
        if self.is_postgres:
            # Lock the chosen runs one by one through the primary key (LATERAL), re-checked as
            # due; and walk the due index in order, stopping at the window. Statistics are
            # stale in exactly the case that matters (a burst of new due runs), and with them
            # the planner would otherwise hash- or bitmap-scan EVERY due run on each claim.
            await self.conn.execute(_INDEX_PATHS_ONLY)
            picks = fair.cte("picks")
            lock = (
                sa.select(runs.c.id)
                .where(runs.c.id == picks.c.id)
                .where(sa.text(_DUE_RECHECK_SQL))
                .where(runs.c.next_attempt_at <= now)
                .with_for_update(skip_locked=True)
                .lateral("locked")
            )
            chosen = sa.select(lock.c.id).select_from(picks).join(lock, sa.true())
        else:  # one writer: nothing to lock
            chosen = (
                sa.select(runs.c.id)
                .where(runs.c.id.in_(fair))
                .where(sa.text(DUE_STATUSES_SQL))
                .where(runs.c.next_attempt_at <= now)
            )
        claimed += await self._claim(chosen, owner, now, lease_until)
        if len(claimed) < limit:
            # Another replica locked some of the fair choice: fall back to the oldest due runs
            # nobody holds, so replicas never idle while work is due.
            oldest = (
                sa.select(runs.c.id)
                .where(sa.text(DUE_STATUSES_SQL))
                .where(runs.c.next_attempt_at <= now)
                .order_by(runs.c.next_attempt_at)
                .limit(limit - len(claimed))
                .with_for_update(skip_locked=True)
            )
            claimed += await self._claim(oldest, owner, now, lease_until)
        if len(claimed) < limit:
            # Runs whose worker died: their lease expired while in_progress.
            expired = (
                sa.select(runs.c.id)
                .where(sa.text(LEASED_SQL))
                .where(runs.c.lease_expires_at <= now)
                .order_by(runs.c.lease_expires_at)
                .limit(limit - len(claimed))
                .with_for_update(skip_locked=True)
            )
            claimed += await self._claim(expired, owner, now, lease_until)
        return claimed

    async def _claim(
        self, ids: sa.Select[Any], owner: str, now: datetime, lease_until: datetime
    ) -> list[Run]:
        stmt = (
            sa.update(runs)
            .where(runs.c.id.in_(ids.scalar_subquery()))
            .values(
                status=RunStatus.IN_PROGRESS.value,
                lease_owner=owner,
                lease_expires_at=lease_until,
                next_attempt_at=None,
                started_at=sa.func.coalesce(runs.c.started_at, sa.literal(now, UTCDateTime())),
            )
            .returning(*runs.c)
        )
        result = await self.conn.execute(stmt)
        return [row_to_run(r) for r in result]

    async def delivery_specs(
        self, schedule_ids: Sequence[str], now: datetime
    ) -> dict[str, DeliverySpec]:
        if not schedule_ids:
            return {}
        q = sa.select(
            schedules.c.id,
            schedules.c.tenant_id,
            schedules.c.name,
            schedules.c.action,
            schedules.c.state,
            schedules.c.deleted_at,
            schedules.c.target,
            schedules.c.retry_policy,
            schedules.c.overlap_policy,
            schedules.c.secret_ciphertext,
            schedules.c.previous_secret_ciphertext,
            schedules.c.previous_secret_expires_at,
        ).where(self._in(schedules.c.id, sorted(set(schedule_ids))))
        out: dict[str, DeliverySpec] = {}
        for r in await self.conn.execute(q):
            secrets = [self.box.decrypt(r.secret_ciphertext, associated=r.id)]
            if r.previous_secret_ciphertext is not None and (
                r.previous_secret_expires_at is not None and r.previous_secret_expires_at > now
            ):
                secrets.append(self.box.decrypt(r.previous_secret_ciphertext, associated=r.id))
            out[r.id] = DeliverySpec(
                schedule_id=r.id,
                tenant_id=r.tenant_id,
                name=r.name,
                action=Action(r.action),
                active=r.state == ScheduleState.ACTIVE.value,
                deleted=r.deleted_at is not None,
                target=None if r.target is None else Target(**r.target),
                retry_policy=RetryPolicy(**r.retry_policy),
                overlap_policy=OverlapPolicy(r.overlap_policy),
                secrets=tuple(secrets),
            )
        return out

    async def earlier_unfinished(self, candidates: Sequence[Run]) -> set[str]:
        if not candidates:
            return set()
        r = runs.alias("r")
        e = runs.alias("e")
        earlier = (
            sa.select(sa.literal(1))
            .select_from(e)
            .where(e.c.schedule_id == r.c.schedule_id)
            .where(e.c.scheduled_for < r.c.scheduled_for)
            .where(e.c.status.in_([s.value for s in _UNFINISHED]))
            .where(e.c.id != r.c.id)
        )
        q = sa.select(r.c.id).where(self._in(r.c.id, [c.id for c in candidates]))
        q = q.where(earlier.exists())
        return {row[0] for row in await self.conn.execute(q)}

    async def write_owned(self, completions: Sequence[Completion]) -> set[str]:
        if not completions:
            return set()
        if self.is_postgres:
            return await self._write_owned_pg(completions)
        return await self._write_owned_sqlite(completions)

    async def _write_owned_pg(self, completions: Sequence[Completion]) -> set[str]:
        """ONE statement (_WRITE_OWNED_PG): each column is an array parameter, so the SQL is the
        same for every batch and asyncpg prepares it once per connection."""
        run_rows = [
            (
                c.run.id,
                c.owner,
                c.run.status.value,
                None if c.run.skip_reason is None else c.run.skip_reason.value,
                c.run.attempt_count,
                c.run.next_attempt_at,
                c.run.started_at,
                c.run.finished_at,
                c.run.lease_owner,
                c.run.lease_expires_at,
            )
            for c in completions
        ]
        attempt_rows = [
            (
                a.run_id,
                a.number,
                a.started_at,
                a.duration_ms,
                a.status_code,
                a.error_kind,
                a.error_message,
                a.response_excerpt,
            )
            for c in completions
            for a in c.attempts
        ]
        event_rows = [
            (c.run.id, *(row[column] for column in _OUTBOX_COLUMNS))
            for c in completions
            for row in map(outbox_row, c.events)
        ]
        params: dict[str, list[Any]] = {}
        for names, rows in (
            (_RUN_PARAMS, run_rows),
            (_ATTEMPT_PARAMS, attempt_rows),
            (_EVENT_PARAMS, event_rows),
        ):
            columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
            params.update(zip(names, map(list, columns), strict=True))
        result = await self.conn.execute(_WRITE_OWNED_PG, params)
        return {row[0] for row in result}

    async def _write_owned_sqlite(self, completions: Sequence[Completion]) -> set[str]:
        """One writer. Driver-level multi-row statements, no per-row SQLAlchemy processing:
        `UPDATE ... FROM (VALUES ...) WHERE lease_owner = owner RETURNING id` (the lease check
        and the write in one), then one INSERT per table for the written runs only."""
        # Datetimes as UTCDateTime stores them, each distinct instant formatted once (a group
        # shares a few: its settle time, its attempts' start times).
        formatted: dict[datetime | None, Any] = {None: None}

        def t(value: datetime | None) -> Any:
            if value not in formatted:
                formatted[value] = _UTC.process_bind_param(value, self.conn.dialect)
            return formatted[value]

        written: set[str] = set()
        for chunk in _chunks(completions):
            params: list[Any] = []
            for c in chunk:
                r = c.run
                params += (
                    r.id,
                    c.owner,
                    r.status.value,
                    None if r.skip_reason is None else r.skip_reason.value,
                    r.attempt_count,
                    t(r.next_attempt_at),
                    t(r.started_at),
                    t(r.finished_at),
                    r.lease_owner,
                    t(r.lease_expires_at),
                )
            result = await self.conn.exec_driver_sql(
                _multi_row(_UPDATE_OWNED, len(chunk), 10), tuple(params)
            )
            written.update(row[0] for row in result)
        kept = [c for c in completions if c.run.id in written]
        attempts = [a for c in kept for a in c.attempts]
        for rows in _chunks(attempts):
            params = []
            for a in rows:
                params += (
                    a.run_id,
                    a.number,
                    t(a.started_at),
                    a.duration_ms,
                    a.status_code,
                    a.error_kind,
                    a.error_message,
                    a.response_excerpt,
                )
            await self.conn.exec_driver_sql(
                _multi_row(_ATTEMPT_INSERT, len(rows), 8), tuple(params)
            )
        events = [e for c in kept for e in c.events]
        for part in _chunks(events):
            params = []
            for e in part:
                row = outbox_row(e)
                row["created_at"] = t(row["created_at"])
                params += (row[column] for column in _OUTBOX_COLUMNS)
            await self.conn.exec_driver_sql(_multi_row(_OUTBOX_INSERT, len(part), 6), tuple(params))
        finished = [c.run for c in kept if c.run.status in _FINISHED]
        failing = {r.schedule_id for r in finished if r.status is RunStatus.FAILED}
        await self.reset_consecutive_failures(
            sorted({r.schedule_id for r in finished if r.status is RunStatus.SUCCEEDED} - failing)
        )
        return written

    async def lock_schedules(self, schedule_ids: Sequence[str]) -> dict[str, Schedule]:
        if not schedule_ids:
            return {}
        q = (
            sa.select(*_SCHEDULE_COLUMNS)
            .where(self._in(schedules.c.id, sorted(set(schedule_ids))))
            .order_by(schedules.c.id)
            .with_for_update()
        )
        return {s.id: s for s in (row_to_schedule(r) for r in await self.conn.execute(q))}

    async def save_breaker(self, changed: Sequence[Schedule]) -> None:
        if not changed:
            return
        stmt = sa.update(schedules).where(schedules.c.id == sa.bindparam("b_id"))
        await self.conn.execute(
            stmt,
            [
                {
                    "b_id": s.id,
                    "consecutive_failures": s.consecutive_failures,
                    "state": s.state.value,
                    "paused_reason": s.paused_reason,
                    "next_run_at": s.next_run_at,
                    "version": s.version,
                    "updated_at": s.updated_at,
                }
                for s in changed
            ],
        )

    async def reset_consecutive_failures(self, schedule_ids: Sequence[str]) -> None:
        """The breaker after runs that all succeeded: count back to 0, touching (and locking)
        only schedules whose count is not 0 already, in id order like `lock_schedules`, so the
        common case writes nothing and never waits on a schedule row."""
        if not schedule_ids:
            return
        failing = (
            sa.select(schedules.c.id)
            .where(self._in(schedules.c.id, sorted(set(schedule_ids))))
            .where(schedules.c.consecutive_failures > 0)
            .order_by(schedules.c.id)
            .with_for_update()
        )
        await self.conn.execute(
            sa.update(schedules)
            .where(schedules.c.id.in_(failing.scalar_subquery()))
            .where(schedules.c.consecutive_failures > 0)
            .values(consecutive_failures=0)
        )

    async def add_events(self, events: Sequence[DomainEvent]) -> None:
        if not events:
            return
        stmt = self._insert(outbox).on_conflict_do_nothing()
        await self.conn.execute(stmt, [outbox_row(e) for e in events])

    async def extend_leases(self, leases: Sequence[tuple[str, str]], until: datetime) -> int:
        if not leases:
            return 0
        stmt = (
            sa.update(runs)
            .where(runs.c.id == sa.bindparam("b_id"))
            .where(runs.c.lease_owner == sa.bindparam("b_owner"))
            .where(sa.text(LEASED_SQL))
        )
        await self.conn.execute(
            stmt,
            # Id order, like the settle write: two transactions never wait on each other in a cycle.
            [{"b_id": i, "b_owner": o, "lease_expires_at": until} for i, o in sorted(leases)],
        )
        return len(leases)

    async def next_run_due_at(self) -> datetime | None:
        # First rows of the two partial indexes (ORDER BY ... LIMIT 1: see next_schedule_due_at).
        due = (
            sa.select(runs.c.next_attempt_at)
            .where(sa.text(DUE_STATUSES_SQL))
            .where(runs.c.next_attempt_at.is_not(None))
            .order_by(runs.c.next_attempt_at)
            .limit(1)
        )
        leased = (
            sa.select(runs.c.lease_expires_at)
            .where(sa.text(LEASED_SQL))
            .where(runs.c.lease_expires_at.is_not(None))
            .order_by(runs.c.lease_expires_at)
            .limit(1)
        )
        row = await self.conn.execute(sa.select(due.scalar_subquery(), leased.scalar_subquery()))
        first, second = row.one()
        found = [t for t in (_as_datetime(first), _as_datetime(second)) if t is not None]
        return min(found) if found else None

    async def count_due(self, now: datetime) -> int:
        q = (
            sa.select(sa.func.count())
            .select_from(runs)
            .where(sa.text(DUE_STATUSES_SQL))
            .where(runs.c.next_attempt_at <= now)
        )
        return int((await self.conn.execute(q)).scalar_one())

    # ---- API -----------------------------------------------------------------------------

    async def schedule_for_tenant(self, tenant_id: str, schedule_id: str) -> Schedule | None:
        q = (
            sa.select(*_SCHEDULE_COLUMNS)
            .where(schedules.c.id == schedule_id)
            .where(schedules.c.tenant_id == tenant_id)
            .where(schedules.c.deleted_at.is_(None))
        )
        row = (await self.conn.execute(q)).first()
        return None if row is None else row_to_schedule(row)

    async def get_run(self, tenant_id: str, schedule_id: str, run_id: str) -> Run | None:
        q = (
            sa.select(runs)
            .where(runs.c.id == run_id)
            .where(runs.c.schedule_id == schedule_id)
            .where(runs.c.tenant_id == tenant_id)
        )
        row = (await self.conn.execute(q)).first()
        return None if row is None else row_to_run(row)

    async def list_runs(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        limit: int,
        before: tuple[datetime, str] | None,
        filters: RunPageFilter,
    ) -> list[Run]:
        q = sa.select(runs).where(runs.c.schedule_id == schedule_id)
        q = q.where(runs.c.tenant_id == tenant_id)
        if filters.status is not None:
            q = q.where(runs.c.status == filters.status.value)
        if filters.scheduled_from is not None:
            q = q.where(runs.c.scheduled_for >= filters.scheduled_from)
        if filters.scheduled_to is not None:
            q = q.where(runs.c.scheduled_for < filters.scheduled_to)
        if before is not None:
            at, last_id = before
            q = q.where(
                sa.or_(
                    runs.c.scheduled_for < at,
                    sa.and_(runs.c.scheduled_for == at, runs.c.id < last_id),
                )
            )
        q = q.order_by(runs.c.scheduled_for.desc(), runs.c.id.desc()).limit(limit)
        return [row_to_run(r) for r in await self.conn.execute(q)]

    async def attempts_of(self, run_id: str) -> list[Attempt]:
        q = (
            sa.select(delivery_attempts)
            .where(delivery_attempts.c.run_id == run_id)
            .order_by(delivery_attempts.c.number)
        )
        return [Attempt(**dict(r._mapping)) for r in await self.conn.execute(q)]

    async def commit(self) -> None:
        await self.conn.commit()


_UNFINISHED = (RunStatus.PENDING, RunStatus.IN_PROGRESS, RunStatus.RETRYING)
_FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED)
_UTC = UTCDateTime()
# Rows per SQLite multi-row statement: at most 10 x 500 parameters, under SQLite's limit (32,766).
_SQLITE_CHUNK = 500
# The lease compare-and-set on SQLite (3.35+: UPDATE FROM, RETURNING); the VALUES columns are
# column1..column10: id, owner, then the state columns in the order `_write_owned_sqlite` lists.
_UPDATE_OWNED = (
    "UPDATE runs SET status = v.column3, skip_reason = v.column4, attempt_count = v.column5, "
    "next_attempt_at = v.column6, started_at = v.column7, finished_at = v.column8, "
    "lease_owner = v.column9, lease_expires_at = v.column10 FROM (VALUES {}) AS v "
    "WHERE runs.id = v.column1 AND runs.lease_owner = v.column2 AND runs.status = 'in_progress' "
    "RETURNING id"
)
_ATTEMPT_INSERT = (
    "INSERT INTO delivery_attempts (run_id, number, started_at, duration_ms, status_code, "
    "error_kind, error_message, response_excerpt) VALUES {}"
)
_OUTBOX_INSERT = (
    "INSERT INTO outbox (event_id, topic, key, type, payload, created_at) VALUES {} "
    "ON CONFLICT DO NOTHING"
)


def _chunks(items: Sequence[_T]) -> list[Sequence[_T]]:
    return [items[i : i + _SQLITE_CHUNK] for i in range(0, len(items), _SQLITE_CHUNK)]


@functools.lru_cache(maxsize=64)
def _multi_row(template: str, rows: int, columns: int) -> str:
    """`template` with `rows` groups of `columns` qmark placeholders (SQLite)."""
    one = "(" + ", ".join("?" * columns) + ")"
    return template.format(", ".join([one] * rows))


# The settle write on PostgreSQL, one round trip (it was six statements): `locked` locks the runs
# still leased to the completion's owner, in id order (no deadlock with another
# settle or a lease extension); `written` stores their state (its WHERE re-checks the lease on
# the newest row version); attempts and outbox rows are inserted for the written runs only, in
# completion order; `reset` is the breaker's all-succeeded case (`reset_consecutive_failures`).
# Data-modifying CTEs always run to completion, whether or not the final SELECT reads them.
_OUTBOX_COLUMNS = ("event_id", "topic", "key", "type", "payload", "created_at")
_WRITE_OWNED_PG = sa.text(
    """
WITH v AS (
  SELECT * FROM unnest(
    CAST(:r_id AS text[]), CAST(:r_owner AS text[]), CAST(:r_status AS text[]),
    CAST(:r_skip_reason AS text[]), CAST(:r_attempt_count AS int[]),
    CAST(:r_next_attempt_at AS timestamptz[]), CAST(:r_started_at AS timestamptz[]),
    CAST(:r_finished_at AS timestamptz[]), CAST(:r_lease_owner AS text[]),
    CAST(:r_lease_expires_at AS timestamptz[])
  ) AS v(id, owner, status, skip_reason, attempt_count, next_attempt_at, started_at,
         finished_at, lease_owner, lease_expires_at)
),
locked AS (
  SELECT runs.id FROM runs JOIN v ON v.id = runs.id
  WHERE runs.status = 'in_progress' AND runs.lease_owner = v.owner
  ORDER BY runs.id
  FOR UPDATE OF runs
),
written AS (
  UPDATE runs SET status = v.status, skip_reason = v.skip_reason,
    attempt_count = v.attempt_count, next_attempt_at = v.next_attempt_at,
    started_at = v.started_at, finished_at = v.finished_at, lease_owner = v.lease_owner,
    lease_expires_at = v.lease_expires_at
  FROM v
  WHERE runs.id = v.id AND runs.id IN (SELECT id FROM locked)
    AND runs.status = 'in_progress' AND runs.lease_owner = v.owner
  RETURNING runs.id, runs.schedule_id, runs.status
),
attempts_in AS (
  INSERT INTO delivery_attempts (run_id, number, started_at, duration_ms, status_code,
    error_kind, error_message, response_excerpt)
  SELECT a.run_id, a.number, a.started_at, a.duration_ms, a.status_code, a.error_kind,
    a.error_message, a.response_excerpt
  FROM unnest(
    CAST(:a_run_id AS text[]), CAST(:a_number AS int[]), CAST(:a_started_at AS timestamptz[]),
    CAST(:a_duration_ms AS int[]), CAST(:a_status_code AS int[]), CAST(:a_error_kind AS text[]),
    CAST(:a_error_message AS text[]), CAST(:a_response_excerpt AS text[])
  ) AS a(run_id, number, started_at, duration_ms, status_code, error_kind, error_message,
         response_excerpt)
  WHERE a.run_id IN (SELECT id FROM written)
),
events_in AS (
  INSERT INTO outbox (event_id, topic, key, type, payload, created_at)
  SELECT e.event_id, e.topic, e.key, e.type, e.payload, e.created_at
  FROM unnest(
    CAST(:e_run_id AS text[]), CAST(:e_event_id AS text[]), CAST(:e_topic AS text[]),
    CAST(:e_key AS text[]), CAST(:e_type AS text[]), CAST(:e_payload AS text[]),
    CAST(:e_created_at AS timestamptz[])
  ) WITH ORDINALITY AS e(run_id, event_id, topic, key, type, payload, created_at, n)
  WHERE e.run_id IN (SELECT id FROM written)
  ORDER BY e.n
  ON CONFLICT DO NOTHING
),
reset AS (
  UPDATE schedules SET consecutive_failures = 0
  WHERE schedules.id IN (
    SELECT s.id FROM schedules s
    WHERE s.id IN (SELECT schedule_id FROM written WHERE status = 'succeeded')
      AND s.id NOT IN (SELECT schedule_id FROM written WHERE status = 'failed')
      AND s.consecutive_failures > 0
    ORDER BY s.id
    FOR UPDATE
  ) AND schedules.consecutive_failures > 0
)
SELECT id FROM written
"""
)
_RUN_PARAMS = tuple(
    "r_" + c
    for c in (
        "id",
        "owner",
        "status",
        "skip_reason",
        "attempt_count",
        "next_attempt_at",
        "started_at",
        "finished_at",
        "lease_owner",
        "lease_expires_at",
    )
)
_ATTEMPT_PARAMS = tuple(
    "a_" + c
    for c in (
        "run_id",
        "number",
        "started_at",
        "duration_ms",
        "status_code",
        "error_kind",
        "error_message",
        "response_excerpt",
    )
)
_EVENT_PARAMS = ("e_run_id", *("e_" + c for c in _OUTBOX_COLUMNS))


def _as_datetime(value: Any) -> datetime | None:
    """Aggregates (min) bypass the column type on SQLite: parse the stored text."""
    if value is None:
        return None
    if isinstance(value, str):
        return UTCDateTime().process_result_value(value, None)  # type: ignore[arg-type]
    assert isinstance(value, datetime)
    return UTCDateTime().process_result_value(value, None)  # type: ignore[arg-type]


class SqlRunStore:
    """`transaction()` opens one connection and one transaction; rolls back unless committed."""

    def __init__(self, engine: AsyncEngine, box: SecretBox) -> None:
        self.engine = engine
        self.box = box

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlRunTx]:
        async with self.engine.connect() as conn:
            await conn.begin()
            try:
                yield SqlRunTx(conn, self.box)
            finally:
                if conn.in_transaction():
                    await conn.rollback()
