"""Backfill (`POST /v1/schedules/{id}/backfill`, DESIGN §5 and §6): runs for a schedule's past
occurrences in (after, until], on request.

- A dry run lists the annotated occurrences (DESIGN §7a) with, for each, whether a run of any
  trigger already exists for it; it stores nothing.
- Otherwise each occurrence gets a pending run (`trigger: backfill`, due now, the schedule's
  payload). Without `include_existing` an occurrence that already has a run is left alone and
  every such backfill shares one backfill id (ONCE), so the unique key (schedule, occurrence,
  backfill id) makes repeating the request, even concurrently, create nothing new. With
  `include_existing` the request gets a fresh backfill id: every occurrence gets a new run.
- At most MAX_BACKFILL_OCCURRENCES per request, refused as "more than" that: counting stops one
  past the limit, so every request costs at most that many occurrences, computed outside any
  transaction.
- The runs count toward `max_runs_per_day` in the UTC day they are created (today), like every
  run (domain/tenant.py), whatever past days they are for; a request that would take today over
  the limit is refused whole. A tenant without an entitlements event has the configured
  defaults (`defaults`: SCHEDULER_DEFAULT_*). Counting reserves today until commit
  (`count_runs_by_tenant`, one advisory lock on PostgreSQL whatever the range), so concurrent
  requests and planner passes cannot both spend what is left.
- The dispatcher claims backfill runs in a lower-priority lane (adapters/db/runs/claims.py): only
  with what a claim has left after the live runs due, so a backfill never delays a live run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scheduler.domain.run import Run, Trigger
from scheduler.domain.schedule import Schedule
from scheduler.domain.tenant import DEFAULT_ENTITLEMENTS, Entitlements, quota_day, runs_remaining
from scheduler.domain.timing import AnnotatedOccurrence, annotated_occurrences
from scheduler.service_layer.errors import InvalidInput, NotFound, QuotaExceeded
from scheduler.service_layer.quota import entitlements_for
from scheduler.service_layer.schedules import compile_timing, off_loop
from scheduler.service_layer.unit_of_work import UnitOfWork, UnitOfWorkFactory
from servicekit.data.ids import new_id

Clock = Callable[[], datetime]
Wake = Callable[[], None]

MAX_BACKFILL_OCCURRENCES = 10_000
ONCE = "bfl_once"


@dataclass(frozen=True)
class BackfillItem:
    occurrence: AnnotatedOccurrence
    exists: bool


@dataclass(frozen=True)
class BackfillResult:
    items: list[BackfillItem]
    """The occurrences in the range (every request fills them; a dry run answers with them)."""
    created: int
    existing: int
    timezone: str


async def backfill(
    uows: UnitOfWorkFactory,
    *,
    tenant_id: str,
    schedule_id: str,
    after: datetime,
    until: datetime,
    dry_run: bool,
    include_existing: bool,
    clock: Clock,
    wake: Wake | None = None,
    defaults: Entitlements = DEFAULT_ENTITLEMENTS,
) -> BackfillResult:
    if after >= until:
        raise InvalidInput("from", "must be before 'to'")
    now = clock()
    if until > now:
        raise InvalidInput("to", "must not be in the future (planned runs cover it)")
    async with uows() as uow:
        schedule = await _schedule(uow, tenant_id, schedule_id)
    # Computed outside any transaction (up to MAX_BACKFILL_OCCURRENCES + 1 of them): no
    # connection or snapshot is held meanwhile (SQLite has one connection for everything).
    occurrences = await off_loop(_occurrences_in, schedule, after, until)
    async with uows() as uow:
        current = await _schedule(uow, tenant_id, schedule_id)
        # Changed meanwhile: the new timing counts.
        if current.definition.timing != schedule.definition.timing:
            occurrences = await off_loop(_occurrences_in, current, after, until)
        schedule = current
        zone, payload = schedule.definition.timing.timezone, schedule.definition.payload
        have = await uow.runs.occurrences_with_runs(tenant_id, schedule.id, after, until)
        items = [BackfillItem(o, o.at in have) for o in occurrences]
        existing = sum(i.exists for i in items)
        if dry_run:
            return BackfillResult(items, 0, existing, zone)
        backfill_id = new_id("bfl", at=now) if include_existing else ONCE
        new_runs = [
            _backfill_run(tenant_id, schedule, i.occurrence.at, now, payload)
            for i in items
            if include_existing or not i.exists
        ]
        for run in new_runs:
            run.backfill_id = backfill_id
        await _check_daily_runs(uow, tenant_id, len(new_runs), now, defaults)
        created = await uow.runs.insert_runs(new_runs)
        await uow.commit()
    if wake is not None and created:
        wake()
    # A run a concurrent twin request inserted first counts as existing.
    return BackfillResult(items, created, existing + len(new_runs) - created, zone)


async def _schedule(uow: UnitOfWork, tenant_id: str, schedule_id: str) -> Schedule:
    schedule = await uow.schedules.get(tenant_id, schedule_id)
    if schedule is None or schedule.is_deleted:
        raise NotFound("schedule", schedule_id)
    return schedule


def _occurrences_in(
    schedule: Schedule, after: datetime, until: datetime
) -> list[AnnotatedOccurrence]:
    """The annotated occurrences in (after, until]; refused beyond MAX_BACKFILL_OCCURRENCES.
    The walk stops at `until` and one past the limit: a request costs at most that many."""
    found = annotated_occurrences(
        compile_timing(schedule.definition.timing),
        schedule_id=schedule.id,
        after=after,
        count=MAX_BACKFILL_OCCURRENCES + 1,
        until=until,
    )
    if len(found) > MAX_BACKFILL_OCCURRENCES:
        raise InvalidInput(
            "to",
            f"(from, to] holds more than {MAX_BACKFILL_OCCURRENCES} occurrences; at most "
            f"{MAX_BACKFILL_OCCURRENCES} per backfill",
        )
    return found


def _backfill_run(
    tenant_id: str, schedule: Schedule, occurrence: datetime, now: datetime, payload: Any
) -> Run:
    """Due now: the occurrence is past; its lag counts from when it was asked for. It cites the
    schedule's version its occurrences were computed from."""
    return Run.planned(
        tenant_id=tenant_id,
        schedule_id=schedule.id,
        schedule_version=schedule.version,
        scheduled_for=occurrence.astimezone(UTC),
        now=now,
        trigger=Trigger.BACKFILL,
        payload=payload,
        due_at=now,
    )


async def _check_daily_runs(
    uow: UnitOfWork, tenant_id: str, new: int, now: datetime, defaults: Entitlements
) -> None:
    """max_runs_per_day in the UTC day of `now`, the day the new runs are created in (their
    created_at is `now`): one count and one lock, whatever days the occurrences fall in."""
    if not new:
        return
    ent = await entitlements_for(uow, tenant_id, defaults)
    used = (await uow.runs.count_runs_by_tenant([tenant_id], *quota_day(now))).get(tenant_id, 0)
    if runs_remaining(ent, used) < new:
        raise QuotaExceeded("max_runs_per_day", ent.max_runs_per_day, used + new)
