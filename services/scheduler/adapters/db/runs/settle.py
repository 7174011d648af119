"""The settle write: a compare-and-set on each completion's lease that stores the run, its
attempts and its events (outbox rows from outbox_rows.py), then the breaker's all-succeeded
reset. PostgreSQL: one statement (sql_postgres.WRITE_OWNED_SQL); SQLite: multi-row statements
(sql_sqlite)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from scheduler.adapters.db.outbox_rows import OUTBOX_COLUMNS, outbox_row
from scheduler.adapters.db.runs import sql_postgres as pg
from scheduler.adapters.db.runs import sql_sqlite as lite
from scheduler.adapters.db.runs.base import RunSql
from scheduler.adapters.db.tables import schedules
from scheduler.adapters.db.types import UTCDateTime
from scheduler.domain.run import RunStatus
from scheduler.service_layer.run_ports import Completion
from servicekit.data.database import CONFIGURED_PLANS_SQL, GENERIC_PLANS_SQL, asyncpg_connection

_FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED)
_UTC = UTCDateTime()


def settle_params(completions: Sequence[Completion]) -> tuple[str, str, str]:
    """pg.WRITE_OWNED_SQL's three parameters: the runs', the attempts' and the events' rows."""
    runs_ = [
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
    attempts = [
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
    events = [
        (c.run.id, *(row[column] for column in OUTBOX_COLUMNS))
        for c in completions
        for row in map(outbox_row, c.events)
    ]
    return _json_rows(runs_), _json_rows(attempts), _json_rows(events)


def _json_rows(rows: Sequence[tuple[Any, ...]]) -> str:
    """Rows as a JSON array of arrays (aware datetimes as RFC 3339 with their offset, which
    PostgreSQL reads back exactly as timestamptz)."""
    return orjson.dumps(rows).decode()


class Settle(RunSql):
    async def settle_leased(self, completions: Sequence[Completion]) -> set[str]:
        if not completions:
            return set()
        if self.is_postgres:
            return await self._settle_leased_pg(completions)
        return await self._settle_leased_sqlite(completions)

    async def _settle_leased_pg(self, completions: Sequence[Completion]) -> set[str]:
        """ONE statement (pg.WRITE_OWNED_SQL) on asyncpg directly, its rows as three JSON
        arrays (the SQL is the same for every batch: asyncpg prepares it once per
        connection)."""
        db = await asyncpg_connection(self.conn)
        # Its generic plan (servicekit.data.database.GENERIC_PLANS_SQL says why), for it alone.
        await db.execute(GENERIC_PLANS_SQL)
        written = await db.fetch(pg.WRITE_OWNED_SQL, *settle_params(completions))
        await db.execute(CONFIGURED_PLANS_SQL)
        return {row[0] for row in written}

    async def _settle_leased_sqlite(self, completions: Sequence[Completion]) -> set[str]:
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
        for chunk in lite.chunks(completions):
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
                lite.multi_row(lite.UPDATE_OWNED, len(chunk), 10), tuple(params)
            )
            written.update(row[0] for row in result)
        kept = [c for c in completions if c.run.id in written]
        attempts = [a for c in kept for a in c.attempts]
        for rows in lite.chunks(attempts):
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
                lite.multi_row(lite.ATTEMPT_INSERT, len(rows), 8), tuple(params)
            )
        events = [e for c in kept for e in c.events]
        for part in lite.chunks(events):
            params = []
            for e in part:
                row = outbox_row(e)
                row["created_at"] = t(row["created_at"])
                params += (row[column] for column in OUTBOX_COLUMNS)
            await self.conn.exec_driver_sql(
                lite.multi_row(lite.OUTBOX_INSERT, len(part), 6), tuple(params)
            )
        finished = [c.run for c in kept if c.run.status in _FINISHED]
        failing = {r.schedule_id for r in finished if r.status is RunStatus.FAILED}
        await self._reset_consecutive_failures(
            sorted({r.schedule_id for r in finished if r.status is RunStatus.SUCCEEDED} - failing)
        )
        return written

    async def _reset_consecutive_failures(self, schedule_ids: Sequence[str]) -> None:
        """The breaker after runs that all succeeded: count back to 0, touching (and locking)
        only schedules whose count is not 0 already, in id order like `schedules.lock()`, so the
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
