"""The runs API's reads: one run, a page of a schedule's runs, a run's attempts."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from scheduler.adapters.db.run_tables import delivery_attempts, runs
from scheduler.adapters.db.runs.base import RunSql
from scheduler.adapters.db.runs.rows import row_to_run
from scheduler.domain.run import Attempt, Run
from scheduler.service_layer.run_ports import RunPageFilter


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
