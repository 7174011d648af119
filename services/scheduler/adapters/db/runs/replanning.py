"""What a timing change reads and removes of the runs planned ahead (domain/retime.py), and the
occurrence preview's count of them; every statement scoped by tenant and schedule."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from scheduler.adapters.db.runs.base import RunSql
from scheduler.adapters.db.tables import runs, schedules
from scheduler.domain.run import RunStatus, Trigger


def _planned(tenant_id: str, schedule_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    """The schedule's planned runs (its occurrences, not manual, replay or backfill runs)."""
    return (
        runs.c.tenant_id == tenant_id,
        runs.c.schedule_id == schedule_id,
        runs.c.trigger == Trigger.SCHEDULE.value,
    )


class Replanning(RunSql):
    def _planned_after(self, tenant_id: str, schedule_id: str, after: datetime) -> sa.Select[Any]:
        return (
            sa.select(runs.c.scheduled_for)
            .where(*_planned(tenant_id, schedule_id))
            .where(runs.c.scheduled_for > after)
        )

    async def planned_after(self, tenant_id: str, schedule_id: str, after: datetime) -> int:
        q = sa.select(sa.func.count()).select_from(
            self._planned_after(tenant_id, schedule_id, after).subquery()
        )
        return int((await self.conn.execute(q)).scalar_one())

    async def unattempted_planned_after(
        self, tenant_id: str, schedule_id: str, after: datetime
    ) -> list[datetime]:
        q = self._planned_after(tenant_id, schedule_id, after).where(*_UNATTEMPTED)
        return [r[0] for r in await self.conn.execute(q.order_by(runs.c.scheduled_for))]

    async def delete_unattempted_planned(
        self, tenant_id: str, schedule_id: str, instants: Sequence[datetime]
    ) -> int:
        if not instants:
            return 0
        deleted = await self.conn.execute(
            sa.delete(runs)
            .where(*_planned(tenant_id, schedule_id))
            .where(runs.c.scheduled_for.in_(list(instants)))
            .where(*_UNATTEMPTED)  # re-checked per row: a run claimed meanwhile stays
        )
        count = int(deleted.rowcount)
        if count:
            # They are no longer planned occurrences: max_runs gets their slots back.
            planned = schedules.c.planned_runs
            await self.conn.execute(
                sa.update(schedules)
                .where(schedules.c.tenant_id == tenant_id)
                .where(schedules.c.id == schedule_id)
                .values(planned_runs=sa.case((planned > count, planned - count), else_=0))
            )
        return count


_UNATTEMPTED = (runs.c.status == RunStatus.PENDING.value, runs.c.attempt_count == 0)
