"""Run use cases for the API: trigger, replay, history, one run with its attempts.

Tenant isolation: every lookup names the tenant; another tenant's schedule or run is NotFound,
exactly like a missing one. A deleted schedule is NotFound too (its runs stay until retention,
but are not listed through a schedule that no longer exists).
Dead letters are the failed runs: `list_runs(..., status=failed)`; replaying one makes a new run
(trigger `replay`) with the same payload, delivered under a new X-Webhook-Id (a new run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduler.domain.run import Attempt, Run, Trigger
from scheduler.service_layer.errors import InvalidInput, NotFound
from scheduler.service_layer.run_ports import RunPageFilter
from scheduler.service_layer.unit_of_work import UnitOfWork, UnitOfWorkFactory
from servicekit.data.pagination import encode_cursor, parse_cursor

Clock = Callable[[], datetime]
Wake = Callable[[], None]


@dataclass(frozen=True)
class RunPage:
    items: list[Run]
    next_cursor: str | None
    last_attempts: Mapping[str, Attempt] = field(default_factory=dict)
    """The items' newest attempts by run id (what a list shows of each run's outcome)."""


@dataclass(frozen=True)
class RunDetail:
    run: Run
    attempts: list[Attempt]


async def trigger_run(
    uows: UnitOfWorkFactory,
    *,
    tenant_id: str,
    schedule_id: str,
    clock: Clock,
    wake: Wake | None = None,
) -> Run:
    """Run now, outside the plan (a paused schedule may be triggered: the tenant asked)."""
    async with uows() as uow:
        schedule = await uow.schedules.get(tenant_id, schedule_id)
        if schedule is None:
            raise NotFound("schedule", schedule_id)
        run = await _insert_now(
            uow,
            tenant_id,
            schedule_id,
            Trigger.MANUAL,
            schedule.definition.payload,
            clock,
            schedule_version=schedule.version,
        )
    if wake is not None:
        wake()
    return run


async def replay_run(
    uows: UnitOfWorkFactory,
    *,
    tenant_id: str,
    schedule_id: str,
    run_id: str,
    clock: Clock,
    wake: Wake | None = None,
) -> Run:
    """A new run with the replayed run's payload."""
    async with uows() as uow:
        schedule = await uow.schedules.get(tenant_id, schedule_id)
        if schedule is None:
            raise NotFound("schedule", schedule_id)
        original = await uow.runs.get_run(tenant_id, schedule_id, run_id)
        if original is None:
            raise NotFound("run", run_id)
        run = await _insert_now(
            uow,
            tenant_id,
            schedule_id,
            Trigger.REPLAY,
            original.payload,
            clock,
            replay_of=original.id,
            schedule_version=schedule.version,
        )
    if wake is not None:
        wake()
    return run


async def _insert_now(
    uow: UnitOfWork,
    tenant_id: str,
    schedule_id: str,
    trigger: Trigger,
    payload: Any,
    clock: Clock,
    *,
    replay_of: str | None = None,
    schedule_version: int | None = None,
) -> Run:
    """A run due now, outside the plan, committed; `schedule_version` the schedule's current."""
    now = clock()
    run = Run.planned(
        tenant_id=tenant_id,
        schedule_id=schedule_id,
        scheduled_for=now,
        now=now,
        trigger=trigger,
        payload=payload,
        schedule_version=schedule_version,
    )
    run.replay_of = replay_of
    await uow.runs.insert_runs([run])
    await uow.commit()
    return run


async def list_runs(
    uows: UnitOfWorkFactory,
    *,
    tenant_id: str,
    schedule_id: str,
    limit: int,
    cursor: str | None,
    filters: RunPageFilter,
) -> RunPage:
    """Newest first by (scheduled_for, id); the cursor is the last item's key."""
    before = _page_start(cursor, filters)
    async with uows() as uow:
        if await uow.schedules.get(tenant_id, schedule_id) is None:
            raise NotFound("schedule", schedule_id)
        rows = await uow.runs.list_runs(
            tenant_id, schedule_id, limit=limit + 1, before=before, filters=filters
        )
        page = _page(rows, limit)
        attempts = await uow.runs.last_attempts_of([r.id for r in page.items if r.attempt_count])
    return RunPage(page.items, page.next_cursor, attempts)


async def list_tenant_runs(
    uows: UnitOfWorkFactory,
    *,
    tenant_id: str,
    limit: int,
    cursor: str | None,
    filters: RunPageFilter,
) -> RunPage:
    """The tenant's runs across its live schedules (`GET /v1/schedules/-/runs`), ordered and
    paged like one schedule's; `filters.schedule_id` narrows it (an unknown id: an empty page)."""
    before = _page_start(cursor, filters)
    async with uows() as uow:
        rows = await uow.runs.list_tenant_runs(
            tenant_id, limit=limit + 1, before=before, filters=filters
        )
        page = _page(rows, limit)
        attempts = await uow.runs.last_attempts_of([r.id for r in page.items if r.attempt_count])
    return RunPage(page.items, page.next_cursor, attempts)


def _page_start(cursor: str | None, filters: RunPageFilter) -> tuple[datetime, str] | None:
    start, end = filters.scheduled_from, filters.scheduled_to
    if start is not None and end is not None and start > end:
        raise InvalidInput("from", "must not be after 'to'")
    return parse_cursor(cursor).key if cursor else None


def _page(rows: list[Run], limit: int) -> RunPage:
    items = rows[:limit]
    more = len(rows) > limit
    next_cursor = encode_cursor(items[-1].scheduled_for, items[-1].id) if more and items else None
    return RunPage(items, next_cursor)


async def get_run(
    uows: UnitOfWorkFactory, *, tenant_id: str, schedule_id: str, run_id: str
) -> RunDetail:
    async with uows() as uow:
        if await uow.schedules.get(tenant_id, schedule_id) is None:
            raise NotFound("schedule", schedule_id)
        run = await uow.runs.get_run(tenant_id, schedule_id, run_id)
        if run is None:
            raise NotFound("run", run_id)
        attempts = await uow.runs.attempts_of(run.id)
    return RunDetail(run, attempts)
