"""SQL side of the ledger (service_layer/ledger_ports.py): a schedule's versions over a window, its
planned runs over a page's range, its other runs, and the periodic check's watermarks.

Index use: versions by the primary key (schedule_id, version); planned runs by
`uq_runs_planned_occurrence` (schedule_id, scheduled_for) WHERE trigger = 'schedule', one index
range per page (the predicate is repeated as the literal `PLANNED_SQL`); other runs by
`ix_runs_schedule_history` (schedule_id, scheduled_for, id); watermarks by their primary key and
`ix_ledger_watermarks_checked`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from scheduler.adapters.db.dialect import dialect_insert, in_values, index_paths
from scheduler.adapters.db.tables import (
    ACTIVE_LIVE_SQL,
    PLANNED_SQL,
    ledger_watermarks,
    runs,
    schedule_versions,
    schedules,
)
from scheduler.adapters.db.versions import definition_from_json
from scheduler.domain.ledger import LedgerRun
from scheduler.service_layer.ledger_ports import (
    OtherRun,
    SchedulePosition,
    SeedStep,
    StoredSpan,
    Watermark,
)

_SPAN_COLUMNS = (
    schedule_versions.c.schedule_id,
    schedule_versions.c.version,
    schedule_versions.c.at,
    schedule_versions.c.superseded_at,
    schedule_versions.c.state,
    schedule_versions.c.definition,
)
_RUN_COLUMNS = (
    runs.c.id,
    runs.c.scheduled_for,
    runs.c.status,
    runs.c.skip_reason,
    runs.c.schedule_version,
)


def _span(m: Mapping[Any, Any]) -> StoredSpan:
    return StoredSpan(
        schedule_id=m["schedule_id"],
        version=m["version"],
        at=m["at"],
        superseded_at=m["superseded_at"],
        state=m["state"],
        timing=definition_from_json(m["definition"]).timing,
    )


def _overlapping(after: datetime, until: datetime) -> tuple[sa.ColumnElement[bool], ...]:
    """Versions in force at some instant t with after < t <= until (in force: at < t <=
    superseded_at)."""
    sup = schedule_versions.c.superseded_at
    return (schedule_versions.c.at < until, sa.or_(sup.is_(None), sup > after))


class SqlLedgerStore:
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self._watch_pass = False

    async def _in_watch_pass(self) -> None:
        """The watch's pass takes index paths for its whole transaction: its tables grow by a
        herd between two ANALYZEs, and on the statistics from before it PostgreSQL scanned all
        of `schedule_versions` (100,000 rows, ~150 ms) for a batch's 200 schedules."""
        if not self._watch_pass:
            self._watch_pass = True
            await index_paths(self.conn)

    def _in(self, column: sa.ColumnElement[Any], values: Sequence[Any]) -> sa.ColumnElement[bool]:
        return in_values(self.conn, column, list(values))

    # ---- one schedule (the API) ----

    async def position(self, tenant_id: str, schedule_id: str) -> SchedulePosition | None:
        q = (
            sa.select(schedules.c.next_run_at, schedules.c.deleted_at)
            .where(schedules.c.id == schedule_id)
            .where(schedules.c.tenant_id == tenant_id)
        )
        row = (await self.conn.execute(q)).first()
        return None if row is None else SchedulePosition(row[0], row[1])

    async def has_versions(self, tenant_id: str, schedule_id: str) -> bool:
        q = (
            sa.select(schedule_versions.c.version)
            .where(schedule_versions.c.schedule_id == schedule_id)
            .where(schedule_versions.c.tenant_id == tenant_id)
            .limit(1)
        )
        return (await self.conn.execute(q)).first() is not None

    async def spans(
        self, tenant_id: str, schedule_id: str, start: datetime, end: datetime, limit: int
    ) -> list[StoredSpan]:
        q = (
            sa.select(*_SPAN_COLUMNS)
            .where(schedule_versions.c.schedule_id == schedule_id)
            .where(schedule_versions.c.tenant_id == tenant_id)
            .where(schedule_versions.c.at < end)
            .where(
                sa.or_(
                    schedule_versions.c.superseded_at.is_(None),
                    schedule_versions.c.superseded_at >= start,
                )
            )
            .order_by(schedule_versions.c.version)
            .limit(limit)
        )
        return [_span(r._mapping) for r in await self.conn.execute(q)]

    async def planned_runs(
        self, tenant_id: str, schedule_id: str, after: datetime, until: datetime, limit: int
    ) -> list[LedgerRun]:
        q = (
            sa.select(*_RUN_COLUMNS)
            .where(runs.c.schedule_id == schedule_id)
            .where(sa.text(PLANNED_SQL))
            .where(runs.c.tenant_id == tenant_id)
            .where(runs.c.scheduled_for > after)
            .where(runs.c.scheduled_for <= until)
            .order_by(runs.c.scheduled_for)
            .limit(limit)
        )
        return [LedgerRun(*r) for r in await self.conn.execute(q)]

    async def planned_by_status(
        self, tenant_id: str, schedule_id: str, start: datetime, end: datetime
    ) -> dict[tuple[str, str | None], list[int]]:
        # One statement (one snapshot: a run inserted meanwhile is in both or neither), a few
        # rows: each (status, skip_reason) with its instants aggregated as whole Unix seconds.
        if self.conn.dialect.name == "postgresql":
            epoch = sa.cast(sa.extract("epoch", runs.c.scheduled_for), sa.BigInteger)
            agg: Any = sa.func.array_agg(epoch)
        else:
            # The stored text starts YYYY-MM-DDTHH:MM:SS (UTC): strftime reads its first 19.
            text = sa.func.substr(runs.c.scheduled_for, 1, 19)
            agg = sa.func.group_concat(sa.func.strftime("%s", text))
        q = (
            sa.select(runs.c.status, runs.c.skip_reason, agg)
            .where(runs.c.schedule_id == schedule_id)
            .where(sa.text(PLANNED_SQL))
            .where(runs.c.tenant_id == tenant_id)
            .where(runs.c.scheduled_for >= start)
            .where(runs.c.scheduled_for < end)
            .group_by(runs.c.status, runs.c.skip_reason)
        )
        out: dict[tuple[str, str | None], list[int]] = {}
        for status, reason, seconds in await self.conn.execute(q):
            if isinstance(seconds, str):
                seconds = [int(x) for x in seconds.split(",")]
            out[(status, reason)] = list(seconds)
        return out

    async def other_runs(
        self, tenant_id: str, schedule_id: str, start: datetime, end: datetime, limit: int
    ) -> list[OtherRun]:
        q = (
            sa.select(
                runs.c.id,
                runs.c.trigger,
                runs.c.scheduled_for,
                runs.c.status,
                runs.c.skip_reason,
                runs.c.schedule_version,
            )
            .where(runs.c.schedule_id == schedule_id)
            .where(runs.c.tenant_id == tenant_id)
            .where(runs.c.trigger != "schedule")
            .where(runs.c.scheduled_for >= start)
            .where(runs.c.scheduled_for < end)
            .order_by(runs.c.scheduled_for, runs.c.id)
            .limit(limit)
        )
        return [OtherRun(*r) for r in await self.conn.execute(q)]

    # ---- the periodic check (system-wide, like the planner) ----

    async def seed_watermarks(self, since: datetime, after: str, window: int) -> SeedStep:
        await self._in_watch_pass()
        # Two index reads, not one anti-join: PostgreSQL ran the NOT EXISTS as a hashed subplan,
        # a scan of every watermark for each window (100,000 rows, ~70 ms, in each of a herd's
        # many passes); the window's ids probe the primary key instead.
        active: sa.ColumnElement[Any] = sa.literal_column(f"({ACTIVE_LIVE_SQL})")
        q = (
            sa.select(schedules.c.id, schedules.c.tenant_id, schedules.c.created_at, active)
            .where(schedules.c.id > after)
            .order_by(schedules.c.id)  # by primary key; replicas insert in one order
            .limit(window)
        )
        scanned = list(await self.conn.execute(q))
        candidates = [r for r in scanned if r[3]]
        known: set[str] = set()
        if candidates:
            existing = sa.select(ledger_watermarks.c.schedule_id).where(
                self._in(ledger_watermarks.c.schedule_id, [r[0] for r in candidates])
            )
            known = {str(i) for (i,) in await self.conn.execute(existing)}
        rows = [
            {"schedule_id": r[0], "tenant_id": r[1], "checked_until": max(since, r[2])}
            for r in candidates
            if r[0] not in known
        ]
        if rows:
            insert = dialect_insert(self.conn, ledger_watermarks).on_conflict_do_nothing()
            await self.conn.execute(insert, rows)
        last = str(scanned[-1][0]) if len(scanned) >= window else None
        return SeedStep(len(rows), last)

    async def claim_watermarks(self, before: datetime, batch: int) -> list[Watermark]:
        await self._in_watch_pass()
        q = (
            sa.select(ledger_watermarks)
            .where(ledger_watermarks.c.checked_until < before)
            .order_by(ledger_watermarks.c.checked_until)
            .limit(batch)
            .with_for_update(skip_locked=True)
        )
        return [Watermark(*r) for r in await self.conn.execute(q)]

    async def positions(self, schedule_ids: Sequence[str]) -> dict[str, SchedulePosition]:
        q = sa.select(schedules.c.id, schedules.c.next_run_at, schedules.c.deleted_at).where(
            self._in(schedules.c.id, schedule_ids)
        )
        return {r[0]: SchedulePosition(r[1], r[2]) for r in await self.conn.execute(q)}

    async def spans_of(
        self, schedule_ids: Sequence[str], after: datetime, until: datetime
    ) -> dict[str, list[StoredSpan]]:
        q = (
            sa.select(*_SPAN_COLUMNS)
            .where(self._in(schedule_versions.c.schedule_id, schedule_ids))
            .where(*_overlapping(after, until))
            .order_by(schedule_versions.c.schedule_id, schedule_versions.c.version)
        )
        out: dict[str, list[StoredSpan]] = {}
        for r in await self.conn.execute(q):
            span = _span(r._mapping)
            out.setdefault(span.schedule_id, []).append(span)
        return out

    async def planned_instants(
        self, schedule_ids: Sequence[str], after: datetime, until: datetime
    ) -> dict[str, list[datetime]]:
        q = (
            sa.select(runs.c.schedule_id, runs.c.scheduled_for)
            .where(self._in(runs.c.schedule_id, schedule_ids))
            .where(sa.text(PLANNED_SQL))
            .where(runs.c.scheduled_for > after)
            .where(runs.c.scheduled_for <= until)
        )
        out: dict[str, list[datetime]] = {}
        for r in await self.conn.execute(q):
            out.setdefault(r[0], []).append(r[1])
        return out

    async def advance_watermarks(self, checked_until: Mapping[str, datetime]) -> None:
        if checked_until:
            stmt = (
                sa.update(ledger_watermarks)
                .where(ledger_watermarks.c.schedule_id == sa.bindparam("sid"))
                .values(checked_until=sa.bindparam("until"))
            )
            rows = [{"sid": k, "until": v} for k, v in checked_until.items()]
            await self.conn.execute(stmt, rows)

    async def drop_watermarks(self, schedule_ids: Sequence[str]) -> None:
        if schedule_ids:
            await self.conn.execute(
                sa.delete(ledger_watermarks).where(
                    self._in(ledger_watermarks.c.schedule_id, schedule_ids)
                )
            )


__all__ = ["SqlLedgerStore"]
