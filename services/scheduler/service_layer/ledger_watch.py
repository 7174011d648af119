"""The ledger's periodic check in the worker (DESIGN.md §7b): count the `missing` occurrences of
the last hour (domain/ledger.py `check_range`) into `scheduler_ledger_missing_total`.

Each schedule has a watermark (`ledger_watermarks`, migration 0015): its occurrences up to it
are counted. A pass, in one transaction:
1. gives live active schedules without one a watermark at max(now - WINDOW, created_at), in a
   walk by primary key, SEED_WINDOW ids a pass (`seed_walk`): from the start once an hour and
   when the process starts (schedules resumed, ids not made now), otherwise from the ids of the
   last RECENT (new schedules: ids are ULIDs, which sort by creation time), a sweep every
   SEED_REST at most (passes in between seed nothing);
2. locks the BATCH stalest watermarks older than `now - SETTLE - RECHECK` (FOR UPDATE SKIP
   LOCKED: replicas take different schedules, and nobody counts a range twice);
3. reads their schedules' `next_run_at`, then their versions and planned runs over the range (in
   that order, as the API does: a planner pass committing meanwhile cannot fake a missing one),
   three statements for the whole batch;
4. counts each schedule's missing occurrences in (max(watermark, now - WINDOW), now - SETTLE]
   and moves its watermark there, or just before its first occurrence still `pending` (the
   planner is behind: look again next pass); a deleted schedule's watermark goes once its last
   occurrences are counted.
The counter is incremented after the commit: a crash between the two loses that batch's count
(at most once, never twice).

Cost: per pass and batch, 5-6 statements, each an index range: the schedules' rows by primary
key, their versions by primary key, their planned runs in the range by
`uq_runs_planned_occurrence` (about one row per occurrence since the last pass: ~200 rows for
200 minutely schedules checked every minute), and the occurrences walked in memory. The seed
reads at most SEED_WINDOW schedules by primary key a pass, and usually only those made in the
last RECENT: a full anti-join over the schedules each pass cost PostgreSQL ~0.1 s for 3,000
schedules, in every one of the many passes of a herd. A step handles one batch
and asks for the next at once while batches are full, so 10,000 active schedules take 50 short
transactions a minute. An occurrence older than WINDOW is never counted (a worker down for longer
loses that part of the check, not the ledger: the API still shows it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.domain.ledger import PlanPosition, check_range
from scheduler.service_layer.ledger import to_span
from scheduler.service_layer.ledger_ports import Watermark
from scheduler.service_layer.unit_of_work import UnitOfWork, UnitOfWorkFactory
from servicekit.data.ids import first_id_at
from servicekit.runtime.worker import WorkerLoop

log = logging.getLogger("scheduler.ledger_watch")
WINDOW = timedelta(hours=1)
SETTLE = timedelta(seconds=60)
"""Occurrences younger than this are left for the next pass (clock skew between replicas)."""
BATCH = 200
INTERVAL_SECONDS = 60.0
RECHECK = timedelta(seconds=INTERVAL_SECONDS)
"""A schedule is checked again once its watermark is this far behind the horizon."""
SEED_WINDOW = 2_000
RECENT = timedelta(minutes=10)
"""How far back a pass looks for new schedules (more than any clock skew between API replicas)."""
SEED_REST = RECHECK
"""Between two sweeps of the recent ids (a new schedule gets its watermark within about this)."""
FULL_WALK = timedelta(hours=1)
"""How often the seed walks every schedule (within WINDOW, so a resumed schedule's occurrences
are still counted from its resumption)."""
_JUST_BEFORE = timedelta(microseconds=1)

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class WatchReport:
    checked: int
    """Schedules whose watermark this pass moved (or dropped)."""
    missing: int
    more: bool
    """The batch was full: run again at once."""


@dataclass
class SeedWalk:
    """Where the seed's walk by schedule id stands (one per process)."""

    after: str = ""
    """The walk goes on after this id ("" the start)."""
    full_from: datetime | None = None
    """When the last full walk started (None: none yet, the next pass starts one)."""
    full: bool = False
    """A full walk is under way: its passes follow each other at once."""
    resting_until: datetime | None = None
    """A sweep of the recent ids ended: passes seed nothing until then (a herd's passes follow
    each other at once while watermark batches are full, and re-read the same ids otherwise)."""

    def next_start(self, now: datetime) -> str | None:
        """Where this pass's seed starts; None: this pass seeds nothing."""
        if self.full_from is None or now - self.full_from >= FULL_WALK:
            self.full_from, self.after, self.full, self.resting_until = now, "", True, None
        elif self.resting_until is not None:
            if now < self.resting_until:
                return None
            self.resting_until = None
        return self.after

    def advance(self, last: str | None, now: datetime) -> bool:
        """Where the next pass starts; True when it should come at once."""
        if last is not None:
            self.after = last
            return self.full
        # At the end: the next sweep, an interval on, reads only the ids of the last RECENT.
        self.after, self.full = first_id_at("sch", now - RECENT), False
        self.resting_until = now + SEED_REST
        return False


async def count_missing_once(
    uows: UnitOfWorkFactory,
    now: datetime,
    *,
    batch: int = BATCH,
    walk: SeedWalk | None = None,
) -> WatchReport:
    """One pass (steps in the module docstring); returns what it counted, committed. Without
    `walk`, the seed reads the first SEED_WINDOW schedules."""
    horizon, floor = now - SETTLE, now - WINDOW
    start = walk.next_start(now) if walk else ""
    async with uows() as uow:
        seeded = (
            await uow.ledger.seed_watermarks(floor, start, SEED_WINDOW)
            if start is not None
            else None
        )
        # Checked up to at least one interval ago: the horizon moves on with the clock, so
        # without this margin every watermark would be stale again a moment later and a pass
        # over more than a batch of schedules would never end.
        marks = await uow.ledger.claim_watermarks(horizon - RECHECK, batch)
        missing = await _check(uow, marks, now, floor, horizon) if marks else 0
        await uow.commit()
    walking = walk.advance(seeded.last, now) if walk is not None and seeded is not None else False
    return WatchReport(len(marks), missing, len(marks) >= batch or walking)


async def _check(
    uow: UnitOfWork, marks: list[Watermark], now: datetime, floor: datetime, horizon: datetime
) -> int:
    ids = [m.schedule_id for m in marks]
    low = min(max(m.checked_until, floor) for m in marks)
    positions = await uow.ledger.positions(ids)  # before the runs: see the module docstring
    spans = await uow.ledger.spans_of(ids, low, horizon)
    planned = await uow.ledger.planned_instants(ids, low, horizon)
    missing = 0
    advanced: dict[str, datetime] = {}
    gone: list[str] = []
    for mark in marks:
        sid, after = mark.schedule_id, max(mark.checked_until, floor)
        pos = positions.get(sid)
        verdict = check_range(
            [to_span(s) for s in spans.get(sid, [])],
            planned.get(sid, []),
            PlanPosition(now, None if pos is None else pos.next_run_at),
            after,
            horizon,
        )
        missing += len(verdict.missing)
        if verdict.missing:
            log.warning(
                "ledger: %d missing occurrence(s) of schedule %s (tenant %s), first %s",
                len(verdict.missing),
                sid,
                mark.tenant_id,
                verdict.missing[0].isoformat(),
            )
        if pos is None or (pos.deleted_at is not None and pos.deleted_at <= horizon):
            gone.append(sid)  # nothing after its deletion can be missing
        elif verdict.first_pending is not None:
            advanced[sid] = max(after, verdict.first_pending - _JUST_BEFORE)
        else:
            advanced[sid] = horizon
    await uow.ledger.advance_watermarks(advanced)
    await uow.ledger.drop_watermarks(gone)
    return missing


class LedgerWatch:
    """The worker loop: a pass every INTERVAL_SECONDS, at once again while batches are full;
    `on_missing(n)` feeds the counter."""

    def __init__(
        self,
        uows: UnitOfWorkFactory,
        clock: Clock,
        on_missing: Callable[[int], None],
        *,
        interval_seconds: float = INTERVAL_SECONDS,
        batch: int = BATCH,
    ) -> None:
        self.uows = uows
        self.clock = clock
        self.on_missing = on_missing
        self.interval_seconds = interval_seconds
        self.batch = batch
        self._started = False
        self.walk = SeedWalk()
        self.loop = WorkerLoop(
            "ledger-watch",
            self.step,
            idle_seconds=interval_seconds,
            backoff_initial_seconds=1.0,
            backoff_max_seconds=interval_seconds,
            outage="database unavailable",
            logger=log,
        )

    async def step(self) -> float | None:
        if not self._started:
            # The first pass waits one interval: the counter is scraped at 0 first, so
            # increase() sees the first count of a process that just started.
            self._started = True
            return self.interval_seconds
        report = await count_missing_once(self.uows, self.clock(), batch=self.batch, walk=self.walk)
        if report.missing:
            self.on_missing(report.missing)
        return 0.0 if report.more else self.interval_seconds

    async def run(self) -> None:
        await self.loop.run()

    def stop(self) -> None:
        self.loop.stop()


__all__ = ["BATCH", "SETTLE", "WINDOW", "LedgerWatch", "WatchReport", "count_missing_once"]
