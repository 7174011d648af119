"""Reads of stored runs: one run, a page of a schedule's or of the tenant's runs, a run's attempts
(the runs API), and the attempts' summed durations of retried runs (the dispatcher, for the run
events)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa

from scheduler.adapters.db.runs.base import RunSql
from scheduler.adapters.db.runs.rows import as_datetime, row_to_run
from scheduler.adapters.db.tables import FAILED_SQL, delivery_attempts, runs, schedules
from scheduler.domain.run import Attempt, Run, RunStatus
from scheduler.service_layer.run_ports import RunPageFilter, RunSummary

# A run that says how the target answered: skipped runs never reached it.
FINISHED_SQL = "status IN ('succeeded', 'failed')"


class RunReads(RunSql):
    async def get_run(self, tenant_id: str, schedule_id: str, run_id: str) -> Run | None:
        q = (
            sa.select(runs)
            .where(runs.c.id == run_id)
            .where(runs.c.schedule_id == schedule_id)
            .where(runs.c.tenant_id == tenant_id)
        )
        row = (await self.conn.execute(q)).first()
        return None if row is None else row_to_run(row)

    async def occurrences_with_runs(
        self, tenant_id: str, schedule_id: str, after: datetime, until: datetime
    ) -> set[datetime]:
        # ix_runs_schedule_history: one index range of the schedule's runs in (after, until].
        q = (
            sa.select(runs.c.scheduled_for)
            .where(runs.c.schedule_id == schedule_id)
            .where(runs.c.tenant_id == tenant_id)
            .where(runs.c.scheduled_for > after)
            .where(runs.c.scheduled_for <= until)
            .distinct()
        )
        return {r[0] for r in await self.conn.execute(q)}

    async def delivery_ms_of(self, run_ids: Sequence[str]) -> dict[str, int]:
        if not run_ids:
            return {}
        q = (
            sa.select(delivery_attempts.c.run_id, sa.func.sum(delivery_attempts.c.duration_ms))
            .where(self._in(delivery_attempts.c.run_id, sorted(set(run_ids))))
            .group_by(delivery_attempts.c.run_id)
        )
        return {str(r): int(ms or 0) for r, ms in (await self.conn.execute(q)).all()}

    async def list_runs(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        limit: int,
        before: tuple[datetime, str] | None,
        filters: RunPageFilter,
    ) -> list[Run]:
        q = schedule_runs_query(tenant_id, schedule_id, limit=limit, before=before, filters=filters)
        return [row_to_run(r) for r in await self.conn.execute(q)]

    async def list_tenant_runs(
        self,
        tenant_id: str,
        *,
        limit: int,
        before: tuple[datetime, str] | None,
        filters: RunPageFilter,
    ) -> list[Run]:
        q = tenant_runs_query(tenant_id, limit=limit, before=before, filters=filters)
        return [row_to_run(r) for r in await self.conn.execute(q)]

    async def last_attempts_of(self, run_ids: Sequence[str]) -> dict[str, Attempt]:
        """Each run's newest attempt, in one query for a whole page (runs never attempted are
        absent)."""
        ids = sorted(set(run_ids))
        if not ids:
            return {}
        d2 = delivery_attempts.alias("d2")
        newest = (
            sa.select(sa.func.max(d2.c.number))
            .where(d2.c.run_id == delivery_attempts.c.run_id)
            .scalar_subquery()
        )
        q = (
            sa.select(delivery_attempts)
            .where(self._in(delivery_attempts.c.run_id, ids))
            .where(delivery_attempts.c.number == newest)
        )
        return {
            a.run_id: a for a in (Attempt(**dict(r._mapping)) for r in await self.conn.execute(q))
        }

    async def attempts_of(self, run_id: str) -> list[Attempt]:
        q = (
            sa.select(delivery_attempts)
            .where(delivery_attempts.c.run_id == run_id)
            .order_by(delivery_attempts.c.number)
        )
        return [Attempt(**dict(r._mapping)) for r in await self.conn.execute(q)]

    async def count_runs_by_bucket(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        start: datetime,
        end: datetime,
        bucket: Literal["hour", "day", "minute"],
    ) -> list[tuple[str, str, int]]:
        key = self._utc_bucket(bucket).label("bucket")
        q = (
            sa.select(key, runs.c.status, sa.func.count())
            .where(runs.c.schedule_id == schedule_id)
            .where(runs.c.scheduled_for >= start)
            .where(runs.c.scheduled_for < end)
            .where(runs.c.tenant_id == tenant_id)
            .group_by(key, runs.c.status)
        )
        return [(str(b), str(st), int(n)) for b, st, n in await self.conn.execute(q)]

    async def last_run(self, tenant_id: str, schedule_id: str) -> Run | None:
        q = (
            sa.select(runs)
            .where(runs.c.schedule_id == schedule_id)
            .where(runs.c.tenant_id == tenant_id)
            .order_by(runs.c.scheduled_for.desc(), runs.c.id.desc())
            .limit(1)
        )
        row = (await self.conn.execute(q)).first()
        return None if row is None else row_to_run(row)

    async def run_summaries(
        self, tenant_id: str, schedule_ids: Sequence[str]
    ) -> dict[str, RunSummary]:
        ids = sorted(set(schedule_ids))
        if not ids:
            return {}
        # Two correlated subqueries per schedule of the page, each a short index walk: the last
        # finished run newest first off ix_runs_schedule_history (it passes over the few runs
        # planned ahead), the next planned run off ix_runs_schedule_unfinished (its predicate
        # repeated as a literal, so PostgreSQL proves the partial index applies).
        last = runs.alias("lf")
        last_id = (
            sa.select(last.c.id)
            .where(last.c.schedule_id == schedules.c.id)
            .where(last.c.tenant_id == tenant_id)
            .where(sa.text(f"lf.{FINISHED_SQL}"))
            .order_by(last.c.scheduled_for.desc(), last.c.id.desc())
            .limit(1)
            .scalar_subquery()
        )
        ahead = runs.alias("np")
        next_at = (
            sa.select(sa.func.min(ahead.c.scheduled_for))
            .where(ahead.c.schedule_id == schedules.c.id)
            .where(ahead.c.tenant_id == tenant_id)
            .where(
                sa.text(
                    "np.status IN ('pending', 'in_progress', 'retrying') "
                    "AND np.trigger <> 'backfill' "
                    "AND np.status = 'pending' AND np.trigger = 'schedule' "
                    "AND np.attempt_count = 0"
                )
            )
            .scalar_subquery()
        )
        q = (
            sa.select(schedules.c.id, last_id.label("last_id"), next_at.label("next_at"))
            .where(schedules.c.tenant_id == tenant_id)
            .where(self._in(schedules.c.id, ids))
        )
        heads = {str(sid): (lid, as_datetime(at)) for sid, lid, at in await self.conn.execute(q)}
        run_ids = sorted({lid for lid, _ in heads.values() if lid is not None})
        finished: dict[str, Run] = {}
        attempts: dict[str, Attempt] = {}
        if run_ids:
            rq = sa.select(runs).where(self._in(runs.c.id, run_ids))
            finished = {r.id: r for r in map(row_to_run, await self.conn.execute(rq))}
            attempts = await self.last_attempts_of(run_ids)
        out: dict[str, RunSummary] = {}
        for sid, (lid, at) in heads.items():
            run = finished.get(lid) if lid is not None else None
            out[sid] = RunSummary(
                last_finished=run,
                last_attempt=None if run is None else attempts.get(run.id),
                next_planned_at=at,
            )
        return out

    def _utc_bucket(self, bucket: Literal["hour", "day", "minute"]) -> sa.ColumnElement[str]:
        """The same text key on both dialects: SQLite stores UTC text (types.py), whose prefix
        is the bucket; PostgreSQL formats the instant in UTC."""
        if self.is_postgres:
            fmt = {
                "day": "YYYY-MM-DD",
                "hour": 'YYYY-MM-DD"T"HH24',
                "minute": 'YYYY-MM-DD"T"HH24:MI',
            }
            utc = sa.func.timezone("UTC", runs.c.scheduled_for)
            return sa.func.to_char(utc, fmt[bucket], type_=sa.String)
        length = {"day": 10, "hour": 13, "minute": 16}
        return sa.func.substr(runs.c.scheduled_for, 1, length[bucket], type_=sa.String)


def schedule_runs_query(
    tenant_id: str,
    schedule_id: str,
    *,
    limit: int,
    before: tuple[datetime, str] | None,
    filters: RunPageFilter,
) -> sa.Select[Any]:
    """Read off ix_runs_schedule_history newest first (failed only: ix_runs_schedule_failed)."""
    q = sa.select(runs).where(runs.c.schedule_id == schedule_id)
    return _page(q.where(runs.c.tenant_id == tenant_id), limit, before, filters)


def tenant_runs_query(
    tenant_id: str, *, limit: int, before: tuple[datetime, str] | None, filters: RunPageFilter
) -> sa.Select[Any]:
    """Read off ix_runs_tenant_scheduled newest first (failed only: ix_runs_tenant_failed); each
    row's schedule is one primary-key probe (runs of deleted schedules stay until retention but
    are not listed, as per schedule)."""
    live = (
        sa.select(schedules.c.id)
        .where(schedules.c.id == runs.c.schedule_id)
        .where(schedules.c.tenant_id == tenant_id)
        .where(schedules.c.deleted_at.is_(None))
    )
    q = sa.select(runs).where(runs.c.tenant_id == tenant_id).where(live.exists())
    if filters.schedule_id is not None:
        q = q.where(runs.c.schedule_id == filters.schedule_id)
    return _page(q, limit, before, filters)


def _page(
    q: sa.Select[Any], limit: int, before: tuple[datetime, str] | None, filters: RunPageFilter
) -> sa.Select[Any]:
    """The filters, the keyset cursor and the order both run lists share."""
    if filters.status is RunStatus.FAILED:
        # A literal, as the dead-letter indexes' predicate: PostgreSQL proves a partial index
        # from it even in a generic prepared plan, never from a bound parameter.
        q = q.where(sa.text(f"runs.{FAILED_SQL}"))
    elif filters.status is not None:
        q = q.where(runs.c.status == filters.status.value)
    if filters.trigger is not None:
        q = q.where(runs.c.trigger == filters.trigger.value)
    if filters.scheduled_from is not None:
        q = q.where(runs.c.scheduled_for >= filters.scheduled_from)
    if filters.scheduled_to is not None:
        q = q.where(runs.c.scheduled_for < filters.scheduled_to)
    if before is not None:
        at, last_id = before
        # The plain `<=` bound is redundant with the OR but is what an index range can use, so
        # a deep page starts at the cursor instead of filtering every newer row.
        q = q.where(runs.c.scheduled_for <= at).where(
            sa.or_(
                runs.c.scheduled_for < at,
                sa.and_(runs.c.scheduled_for == at, runs.c.id < last_id),
            )
        )
    return q.order_by(runs.c.scheduled_for.desc(), runs.c.id.desc()).limit(limit)
