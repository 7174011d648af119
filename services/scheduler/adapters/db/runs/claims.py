"""The dispatcher's queries: lease acquisition in lanes (runs whose worker died, live runs
tenant-fair, then the oldest, then backfill runs), what an attempt needs of each schedule, the
overlap check, how long a buffer_one run waits and its wake-up, lease extension, the sleep probe
and the queue depth."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from scheduler.adapters.db.runs import claims_pg
from scheduler.adapters.db.runs.base import RunSql
from scheduler.adapters.db.runs.rows import SPEC_COLUMNS, as_datetime, delivery_spec, row_to_run
from scheduler.adapters.db.tables import (
    BACKFILL_DUE_SQL,
    LEASED_RECHECK_SQL,
    LEASED_SQL,
    LIVE_DUE_SQL,
    PLANNED_SQL,
    UNFINISHED_LIVE_SQL,
    delivery_attempts,
    runs,
    schedules,
)
from scheduler.adapters.db.types import UTCDateTime
from scheduler.domain.run import (
    LOST_ATTEMPT_KIND,
    LOST_ATTEMPT_MESSAGE,
    Run,
    RunStatus,
)
from scheduler.service_layer.run_ports import ClaimedRuns, DeliverySpec, MisfireFacts
from servicekit.data.database import CONFIGURED_PLANS_SQL, asyncpg_connection

# The tenant-fair claim on PostgreSQL walks at most this many tenants with a live run due now
# (one index probe each, sql_postgres.FAIR_CHOICE_SQL); due tenants beyond it are served
# by the oldest-first fill and, as their runs become the oldest, first in a later claim.
FAIR_TENANT_SCAN = 1000
# SQLite (one writer, embedded) ranks tenants within the oldest `limit x 8` live due runs (at
# least 200, at most 2,000): portable SQL, fair within that window.
FAIR_WINDOW_FACTOR = 8
FAIR_WINDOW_MIN = 200
FAIR_WINDOW_MAX = 2000


class Claims(RunSql):
    async def claim_due_runs(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> ClaimedRuns:
        """Lanes in order: runs whose worker died (at most a quarter of the claim, so a
        sustained backlog never postpones them, nor their poison limit); live due runs
        tenant-fair; the oldest live due runs nobody holds; then backfill runs, only with what
        the claim has left (a backfill never delays a live run). With each run's delivery spec
        (PostgreSQL: in the same statements, claims_pg.py)."""
        if self.is_postgres:
            return await self._claim_pg(owner, now, lease_until, limit)
        expiries: dict[str, int] = {}
        claimed = await self._reclaim_expired(owner, now, lease_until, max(1, limit // 4), expiries)
        if len(claimed) < limit:
            claimed += await self._claim(
                runs.c.id.in_(self._fair_choice_sqlite(now, limit - len(claimed))),
                owner,
                now,
                lease_until,
            )
        for lane in (LIVE_DUE_SQL, BACKFILL_DUE_SQL):
            if len(claimed) < limit:
                claimed += await self._claim_oldest(
                    lane, owner, now, lease_until, limit - len(claimed)
                )
        specs = await self.delivery_specs([r.schedule_id for r in claimed], now)
        return ClaimedRuns(claimed, specs, expiries)

    async def _claim_pg(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> ClaimedRuns:
        db = await asyncpg_connection(self.conn)
        # Index paths and generic plans (servicekit.data.database.CLAIM_PLANNER_SQL says why). The
        # generic plans are for the claim's own statements (reset below); the index paths stay
        # for its whole transaction, the overlap checks that follow included.
        await db.execute(claims_pg.CLAIM_PLANNER)
        rows: list[Any] = []
        claimed: list[Run] = []
        expiries: dict[str, int] = {}
        expired = await db.fetch(claims_pg.EXPIRED, now, max(1, limit // 4))
        if expired:
            taken = await db.fetch(
                claims_pg.RECLAIM, owner, lease_until, now, sorted(r["id"] for r in expired)
            )
            rows += taken
            claimed += await self._count_lost_attempts(
                [claims_pg.run_of(r, owner, now, lease_until) for r in taken],
                {r["id"]: (r["next_attempt_at"], r["lease_expires_at"]) for r in expired},
                now,
                expiries,
            )
        if len(claimed) < limit:
            left = limit - len(claimed)
            got = await db.fetch(claims_pg.FAIR, owner, lease_until, now, left, FAIR_TENANT_SCAN)
            rows += got
            claimed += (claims_pg.run_of(r, owner, now, lease_until) for r in got)
        # Another replica locked some of the fair choice: the oldest due runs nobody holds, so
        # replicas never idle while work is due; then the backfill lane.
        for lane in (claims_pg.OLDEST_LIVE, claims_pg.OLDEST_BACKFILL):
            if len(claimed) < limit:
                got = await db.fetch(lane, owner, lease_until, now, limit - len(claimed))
                rows += got
                claimed += (claims_pg.run_of(r, owner, now, lease_until) for r in got)
        await db.execute(CONFIGURED_PLANS_SQL)
        return ClaimedRuns(claimed, claims_pg.specs_of(rows, self.box, now), expiries)

    def _fair_choice_sqlite(self, now: datetime, limit: int) -> sa.Select[Any]:
        """The ids of the tenant-fair choice: each due tenant's oldest live run before anyone's
        second. One writer: nothing to lock. Ranking needs a window function (no LATERAL)."""
        window = (
            sa.select(runs.c.id, runs.c.tenant_id, runs.c.next_attempt_at)
            .where(sa.text(LIVE_DUE_SQL))
            .where(runs.c.next_attempt_at <= now)
            .order_by(runs.c.next_attempt_at)
            .limit(min(max(limit * FAIR_WINDOW_FACTOR, FAIR_WINDOW_MIN), FAIR_WINDOW_MAX))
            .subquery("w")
        )
        turn = sa.func.row_number().over(
            partition_by=window.c.tenant_id, order_by=(window.c.next_attempt_at, window.c.id)
        )
        ranked = sa.select(window.c.id, window.c.next_attempt_at, turn.label("turn")).subquery("r")
        return (
            sa.select(ranked.c.id)
            .order_by(ranked.c.turn, ranked.c.next_attempt_at, ranked.c.id)
            .limit(limit)
        )

    async def _claim_oldest(
        self, lane: str, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[Run]:
        oldest = (
            sa.select(runs.c.id)
            .where(sa.text(lane))
            .where(runs.c.next_attempt_at <= now)
            .order_by(runs.c.next_attempt_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return await self._claim(runs.c.id.in_(oldest.scalar_subquery()), owner, now, lease_until)

    async def _reclaim_expired(
        self,
        owner: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        expiries: dict[str, int],
    ) -> list[Run]:
        """Runs whose worker died: their lease expired while in_progress. The attempt that
        worker was making is counted and recorded as lost (domain/run.py, "Lost attempts"), so
        the next one goes out as the next X-Attempt, and `expiries` gets how often that
        happened. One statement when nothing expired (the common case); four otherwise."""
        expired = (
            sa.select(runs.c.id, runs.c.next_attempt_at, runs.c.lease_expires_at)
            .where(sa.text(LEASED_SQL))
            .where(runs.c.lease_expires_at <= now)
            .order_by(runs.c.lease_expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        lost = {
            r.id: (as_datetime(r.next_attempt_at), as_datetime(r.lease_expires_at))
            for r in await self.conn.execute(expired)
        }
        if not lost:
            return []
        taken = await self._claim(
            self._in(runs.c.id, sorted(lost)), owner, now, lease_until, count_lost_attempt=True
        )
        return await self._count_lost_attempts(taken, lost, now, expiries)

    async def _count_lost_attempts(
        self,
        taken: list[Run],
        lost: dict[str, tuple[datetime | None, datetime | None]],
        now: datetime,
        expiries: dict[str, int],
    ) -> list[Run]:
        """Record the attempt each taken-over run's dead worker was making (worker_lost) and put
        in `expiries` how many such attempts each run has."""
        attempts: list[dict[str, Any]] = []
        for run in taken:
            claimed_at, lease_end = lost[run.id]
            attempts.append(
                {
                    "run_id": run.id,
                    "number": run.attempt_count,
                    # Its claim time; a run claimed before claims stored it: its lease's end.
                    "started_at": claimed_at or lease_end or now,
                    "duration_ms": 0,  # unknown: nothing came back
                    "status_code": None,
                    "error_kind": LOST_ATTEMPT_KIND,
                    "error_message": LOST_ATTEMPT_MESSAGE,
                    "response_excerpt": None,
                }
            )
        if not attempts:
            return taken
        # A number already taken means the attempt is recorded: never fail the claim on it.
        insert = self._insert(delivery_attempts).on_conflict_do_nothing()
        await self.conn.execute(insert, attempts)
        counts = (
            sa.select(delivery_attempts.c.run_id, sa.func.count())
            .where(self._in(delivery_attempts.c.run_id, [r.id for r in taken]))
            .where(delivery_attempts.c.error_kind == LOST_ATTEMPT_KIND)
            .group_by(delivery_attempts.c.run_id)
        )
        expiries.update((str(i), int(n)) for i, n in await self.conn.execute(counts))
        return taken

    async def _claim(
        self,
        which: sa.ColumnElement[bool],
        owner: str,
        now: datetime,
        lease_until: datetime,
        *,
        count_lost_attempt: bool = False,
    ) -> list[Run]:
        # next_attempt_at holds the claim time while in_progress: a lost attempt's start.
        at = sa.literal(now, UTCDateTime())
        values: dict[str, Any] = {
            "status": RunStatus.IN_PROGRESS.value,
            "lease_owner": owner,
            "lease_expires_at": lease_until,
            "next_attempt_at": at,
            "started_at": sa.func.coalesce(runs.c.started_at, at),
            # Flow control counts a destination's leased runs by it (claims_pg._claim).
            "destination": sa.select(schedules.c.destination)
            .where(schedules.c.id == runs.c.schedule_id)
            .scalar_subquery(),
        }
        if count_lost_attempt:
            values["attempt_count"] = runs.c.attempt_count + 1
        stmt = sa.update(runs).where(which).values(**values).returning(*runs.c)
        result = await self.conn.execute(stmt)
        return [row_to_run(r) for r in result]

    async def delivery_specs(
        self, schedule_ids: Sequence[str], now: datetime
    ) -> dict[str, DeliverySpec]:
        if not schedule_ids:
            return {}
        columns = [schedules.c[name] for name in SPEC_COLUMNS]
        q = sa.select(*columns).where(self._in(schedules.c.id, sorted(set(schedule_ids))))
        out: dict[str, DeliverySpec] = {}
        for r in await self.conn.execute(q):
            out[r.id] = delivery_spec(dict(r._mapping), self.box, now)
        return out

    async def earlier_unfinished(
        self, candidates: Sequence[Run], *, lock: bool = False, excluding: Collection[str] = ()
    ) -> dict[str, int]:
        """Counted up to 2 (all the overlap policies tell apart), each an index range of
        ix_runs_schedule_unfinished (its predicate as literal SQL, so even a generic plan can
        use it). Backfill runs never count: a backfill never holds up a live occurrence."""
        if not candidates:
            return {}
        r = runs.alias("r")
        e = runs.alias("e")
        earlier = (
            sa.select(e.c.id)
            .where(e.c.schedule_id == r.c.schedule_id)
            .where(e.c.scheduled_for < r.c.scheduled_for)
            .where(sa.text(UNFINISHED_LIVE_SQL))  # e's: the only FROM
            .where(e.c.id != r.c.id)
            .limit(2)
            .correlate(r)
        )
        if excluding:
            earlier = earlier.where(sa.not_(self._in(e.c.id, sorted(excluding))))
        if lock and self.is_postgres:
            # FOR SHARE under READ COMMITTED: a predecessor another transaction is settling is
            # waited for and re-checked on its newest version (SQLite: one writer at a time).
            earlier = earlier.with_for_update(read=True, of=e)
        count = (
            sa.select(sa.func.count()).select_from(earlier.subquery("earlier")).scalar_subquery()
        )
        q = sa.select(r.c.id, count.label("n")).where(self._in(r.c.id, [c.id for c in candidates]))
        return {row.id: int(row.n) for row in await self.conn.execute(q) if row.n}

    async def misfire_facts(
        self, candidates: Sequence[Run], missed_before: datetime
    ) -> MisfireFacts:
        """Two index probes per run, both backwards in uq_runs_planned_occurrence (its predicate
        as literal SQL): the schedule's latest planned run not skipped and due before
        `missed_before` (past the skipped rows after it: the overlaps of a buffer_one run that
        waited), and the later finish of its two previous planned runs not skipped (a bounded
        read: the run a buffer_one run waited for is the one before it, or the one before that
        when the tenant's suspension or quota skipped one between)."""
        if not candidates:
            return MisfireFacts()
        r = runs.alias("r")
        e = runs.alias("e")
        before = sa.literal(missed_before, UTCDateTime())
        latest = (
            sa.select(e.c.scheduled_for)
            .where(e.c.schedule_id == r.c.schedule_id)
            .where(sa.text(PLANNED_SQL))  # e's: the only FROM
            .where(e.c.scheduled_for >= r.c.scheduled_for)  # the run itself at the latest
            .where(e.c.scheduled_for < before)
            .where(e.c.status != RunStatus.SKIPPED.value)
            .where(sa.func.coalesce(e.c.due_at, e.c.scheduled_for) < before)
            .order_by(e.c.scheduled_for.desc())
            .limit(1)
            .correlate(r)
            .scalar_subquery()
        )
        p = runs.alias("p")
        last_two = (
            sa.select(p.c.status, p.c.finished_at)
            .where(p.c.schedule_id == r.c.schedule_id)
            .where(sa.text(PLANNED_SQL))  # p's: the only FROM
            .where(p.c.scheduled_for < r.c.scheduled_for)
            .order_by(p.c.scheduled_for.desc())
            .limit(2)
            .correlate(r)
            .subquery("last_two")
        )
        previous = (
            sa.select(sa.func.max(last_two.c.finished_at))
            .where(last_two.c.status != RunStatus.SKIPPED.value)
            .scalar_subquery()
        )
        q = sa.select(r.c.id, r.c.schedule_id, latest.label("latest"), previous.label("prev"))
        q = q.where(self._in(r.c.id, [c.id for c in candidates]))
        facts = MisfireFacts()
        for row in await self.conn.execute(q):
            if (at := as_datetime(row.latest)) is not None:
                facts.latest_missed[row.schedule_id] = at
            if (at := as_datetime(row.prev)) is not None:
                facts.predecessor_finished[row.id] = at
        return facts

    async def predecessors_next_move(self, waiting: Sequence[Run]) -> dict[str, datetime]:
        """The index range of `earlier_unfinished` (at most 2 rows each), with the earliest
        lease end (in_progress; a run awaiting its completion call holds no lease: its
        completion_deadline) or next_attempt_at (pending, retrying) among them."""
        if not waiting:
            return {}
        r = runs.alias("r")
        e = runs.alias("e")
        moves = sa.case(
            (
                e.c.status == RunStatus.IN_PROGRESS.value,
                sa.func.coalesce(e.c.lease_expires_at, e.c.completion_deadline),
            ),
            else_=e.c.next_attempt_at,
        )
        earlier = (
            sa.select(moves.label("at"))
            .where(e.c.schedule_id == r.c.schedule_id)
            .where(e.c.scheduled_for < r.c.scheduled_for)
            .where(sa.text(UNFINISHED_LIVE_SQL))  # e's: the only FROM
            .where(e.c.id != r.c.id)
            .limit(2)
            .correlate(r)
            .subquery("earlier")
        )
        first = sa.select(sa.func.min(earlier.c.at)).scalar_subquery()
        q = sa.select(r.c.id, first.label("at")).where(self._in(r.c.id, [w.id for w in waiting]))
        out: dict[str, datetime] = {}
        for row in await self.conn.execute(q):
            at = as_datetime(row.at)
            if at is not None:
                out[row.id] = at
        return out

    async def wake_waiting(self, schedule_ids: Sequence[str], now: datetime) -> int:
        # A waiting run is pending with next_attempt_at past its due instant, which is past:
        # only Run.wait does that (a run planned ahead has next_attempt_at = its due, ahead).
        if not schedule_ids:
            return 0
        due = sa.func.coalesce(runs.c.due_at, runs.c.scheduled_for)
        stmt = (
            sa.update(runs)
            .where(self._in(runs.c.schedule_id, sorted(set(schedule_ids))))
            .where(runs.c.status == RunStatus.PENDING.value)
            .where(runs.c.next_attempt_at > now)
            .where(due <= now)
            .values(next_attempt_at=sa.literal(now, UTCDateTime()))
        )
        result = await self.conn.execute(stmt)
        return int(result.rowcount or 0)

    async def extend_run_leases(self, leases: Sequence[tuple[str, str]], until: datetime) -> int:
        if not leases:
            return 0
        stmt = (
            sa.update(runs)
            .where(runs.c.id == sa.bindparam("b_id"))
            .where(runs.c.lease_owner == sa.bindparam("b_owner"))
            .where(sa.text(LEASED_RECHECK_SQL))  # by primary key, whatever the statistics
        )
        await self.conn.execute(
            stmt,
            # Id order, like the settle write: two transactions never wait on each other in a cycle.
            [{"b_id": i, "b_owner": o, "lease_expires_at": until} for i, o in sorted(leases)],
        )
        return len(leases)

    async def next_run_due_at(self) -> datetime | None:
        # First rows of the three partial indexes (ORDER BY ... LIMIT 1: see next_schedule_due_at).
        def first(column: sa.Column[Any], predicate: str) -> sa.ScalarSelect[Any]:
            q = sa.select(column).where(sa.text(predicate)).where(column.is_not(None))
            return q.order_by(column).limit(1).scalar_subquery()

        row = await self.conn.execute(
            sa.select(
                first(runs.c.next_attempt_at, LIVE_DUE_SQL),
                first(runs.c.next_attempt_at, BACKFILL_DUE_SQL),
                first(runs.c.lease_expires_at, LEASED_SQL),
            )
        )
        found = [t for t in map(as_datetime, row.one()) if t is not None]
        return min(found) if found else None

    async def count_due(self, now: datetime) -> int:
        def due(predicate: str) -> sa.ScalarSelect[Any]:
            q = sa.select(sa.func.count()).select_from(runs).where(sa.text(predicate))
            return q.where(runs.c.next_attempt_at <= now).scalar_subquery()

        row = await self.conn.execute(sa.select(due(LIVE_DUE_SQL), due(BACKFILL_DUE_SQL)))
        return sum(int(n) for n in row.one())

    # ---- API -----------------------------------------------------------------------------
