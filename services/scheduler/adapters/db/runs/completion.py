"""The runs' completion-callback statements (domain/run.py "Awaiting a completion"): the
per-attempt token written before a callback-mode delivery, the deadline written with the settle
that accepted it, the lock a completion call or the watchdog takes, and the write that ends an
awaiting. Not the hot path: a row (or a few) per statement."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from scheduler.adapters.db.dialect import index_paths
from scheduler.adapters.db.runs.base import RunSql
from scheduler.adapters.db.runs.rows import row_to_run
from scheduler.adapters.db.tables import AWAITING_SQL, LEASED_RECHECK_SQL, delivery_attempts, runs
from scheduler.domain.run import Run


class CompletionQueries(RunSql):
    async def store_completion_token(self, run: Run, owner: str) -> bool:
        # Compare-and-set on the lease, like the settle: a worker that lost the run writes
        # nothing (and then does not deliver).
        stmt = (
            sa.update(runs)
            .where(runs.c.id == run.id)
            .where(sa.text(LEASED_RECHECK_SQL))  # by primary key, whatever the statistics
            .where(runs.c.lease_owner == owner)
            .values(
                completion_attempt=run.completion_attempt,
                completion_token_hash=run.completion_token_hash,
                completion_status=None,
            )
        )
        return bool((await self.conn.execute(stmt)).rowcount)

    async def mark_awaiting(self, awaiting: Sequence[Run]) -> None:
        # In the settle's transaction, right after its compare-and-set wrote these runs
        # in_progress without a lease.
        if not awaiting:
            return
        stmt = (
            sa.update(runs)
            .where(runs.c.id == sa.bindparam("b_id"))
            .where(sa.text(LEASED_RECHECK_SQL))
            .where(runs.c.lease_owner.is_(None))
            .values(completion_deadline=sa.bindparam("b_deadline"))
        )
        rows = [{"b_id": r.id, "b_deadline": r.completion_deadline} for r in awaiting]
        await self.conn.execute(stmt, rows)

    async def lock_for_completion(self, run_id: str) -> Run | None:
        q = sa.select(runs).where(runs.c.id == run_id).with_for_update()
        row = (await self.conn.execute(q)).first()
        return None if row is None else row_to_run(row)

    async def lock_overdue_awaiting(self, now: datetime, limit: int) -> list[Run]:
        # ix_runs_completion_deadline; SKIP LOCKED: another worker's watchdog (or a completion
        # call) holding a run leaves it to them, so no run is failed twice. Index paths: on the
        # statistics of before a burst PostgreSQL scanned every run (83,500 rows, ~64 ms a pass).
        await index_paths(self.conn)
        q = (
            sa.select(runs)
            .where(sa.text(AWAITING_SQL))
            .where(runs.c.completion_deadline <= now)
            .where(sa.text(LEASED_RECHECK_SQL))  # not ix_runs_lease's predicate: see tables.py
            .where(runs.c.lease_owner.is_(None))
            .order_by(runs.c.completion_deadline)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return [row_to_run(r) for r in await self.conn.execute(q)]

    async def write_completion_ends(self, ended: Sequence[Run]) -> None:
        if not ended:
            return
        await self.conn.execute(
            sa.update(runs)
            .where(runs.c.id == sa.bindparam("b_id"))
            .values(
                status=sa.bindparam("b_status"),
                next_attempt_at=sa.bindparam("b_next"),
                finished_at=sa.bindparam("b_finished"),
                completion_deadline=None,
                completion_status=sa.bindparam("b_completion_status"),
                completed_at=sa.bindparam("b_completed_at"),
                completion_detail=sa.bindparam("b_detail"),
                completion_output=sa.bindparam("b_output"),
                too_fast=sa.bindparam("b_too_fast"),
            ),
            [
                {
                    "b_id": r.id,
                    "b_status": r.status.value,
                    "b_next": r.next_attempt_at,
                    "b_finished": r.finished_at,
                    "b_completion_status": None
                    if r.completion_status is None
                    else r.completion_status.value,
                    "b_completed_at": r.completed_at,
                    "b_detail": r.completion_detail,
                    "b_output": r.completion_output,
                    "b_too_fast": r.too_fast,
                }
                for r in ended
            ],
        )
        updates = [u for r in ended for u in r.attempt_updates]
        if not updates:
            return
        a = delivery_attempts.c
        await self.conn.execute(
            sa.update(delivery_attempts)
            .where(a.run_id == sa.bindparam("b_run_id"))
            .where(a.number == sa.bindparam("b_number"))
            .values(
                completed_at=sa.bindparam("b_completed_at"),
                completion_detail=sa.bindparam("b_detail"),
                completion_output=sa.bindparam("b_output"),
                # A failed end is the attempt's error; a success leaves its 2xx as it was.
                error_kind=sa.func.coalesce(sa.bindparam("b_kind", type_=sa.String), a.error_kind),
                error_message=sa.func.coalesce(
                    sa.bindparam("b_message", type_=sa.String), a.error_message
                ),
            ),
            [
                {
                    "b_run_id": u.run_id,
                    "b_number": u.number,
                    "b_completed_at": u.completed_at,
                    "b_detail": u.detail,
                    "b_output": u.output,
                    "b_kind": u.error_kind,
                    "b_message": u.error_message,
                }
                for u in updates
            ],
        )
