"""The steps of writing ONE schedule inside an open unit of work, shared by the one-at-a-time
use cases (service_layer/schedules.py: create, PATCH, PUT by key, delete) and the declarative
apply (service_layer/apply.py), which runs many of them in one transaction. Validation is
separate from writing so that apply can check every definition first and write none when one is
wrong; the writes themselves are the same code either way.

This module does not import service_layer.schedules (that one imports this).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from scheduler.domain.definition import ScheduleDefinition
from scheduler.domain.policies import Action, ScheduleState
from scheduler.domain.retime import retime
from scheduler.domain.schedule import TIMING_FIELDS, Schedule
from scheduler.domain.tenant import Entitlements
from scheduler.domain.timing import CompiledTiming, InvalidTiming, Timing, check_timing
from scheduler.service_layer.errors import InvalidInput
from scheduler.service_layer.quota import check_definition
from scheduler.service_layer.unit_of_work import UnitOfWork
from servicekit.data.ids import new_id

Clock = Callable[[], datetime]
SecretFactory = Callable[[], str]

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def off_loop(fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Run engine work in a worker thread. A walk may cover MAX_GAP_YEARS of a zone's offset
    table (tens of ms when not cached) and a min_interval check a century of transitions; on the
    event loop that would stall every other request of the process meanwhile."""
    return await asyncio.to_thread(fn, *args, **kwargs)


# ---- validation (CPU only: call through off_loop) -------------------------------------------


def validate_timing(
    timing: Timing, now: datetime, *, planned_runs: int = 0, new: bool = True
) -> CompiledTiming:
    """check_timing with its errors as InvalidInput naming the field (the API's 422)."""
    try:
        return check_timing(timing, now, planned_runs=planned_runs, new=new)
    except InvalidTiming as exc:
        raise InvalidInput(exc.field, exc.reason) from None


def compile_timing(timing: Timing) -> CompiledTiming:
    try:
        return timing.compile()
    except InvalidTiming as exc:
        raise InvalidInput(exc.field, exc.reason) from None


def check_secret(definition: ScheduleDefinition, secret: str | None) -> None:
    if secret is not None and definition.action is not Action.WEBHOOK:
        raise InvalidInput("secret", "must be absent when action is 'event' (nothing is signed)")


def validated(
    definition: ScheduleDefinition,
    limits: Entitlements,
    now: datetime,
    *,
    planned_runs: int = 0,
    new: bool = True,
) -> CompiledTiming:
    """What create and PATCH check before storing: the timing rules, the cross-field rules the
    request shape cannot express, and the tenant's limits on one definition (min_interval,
    payload size: QuotaExceeded)."""
    timing = validate_timing(definition.timing, now, planned_runs=planned_runs, new=new)
    for name, reason in definition.problems():
        raise InvalidInput(name, reason)
    check_definition(limits, recurrence=timing.recurrence, payload=definition.payload, since=now)
    return timing


# ---- create ------------------------------------------------------------------------------------


def new_schedule(
    definition: ScheduleDefinition,
    *,
    tenant_id: str,
    next_run_at: datetime | None,
    now: datetime,
    key: str | None,
    new_secret: SecretFactory,
) -> tuple[Schedule, str | None]:
    """A new schedule (event `schedule.created` recorded) and its signing secret; only a webhook
    is signed, so an event schedule gets none. The caller adds both to the repository."""
    schedule = Schedule.create(
        id=new_id("sch", at=now),
        tenant_id=tenant_id,
        definition=definition,
        next_run_at=next_run_at,
        now=now,
        key=key,
    )
    return schedule, new_secret() if definition.action is Action.WEBHOOK else None


# ---- update ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replan:
    """Where an update leaves the plan: the next occurrence to plan and the runs planned ahead
    under the old timing to delete (domain/retime.py)."""

    next_run_at: datetime | None
    drop: tuple[datetime, ...] = ()
    reopens: bool = False
    """A completed schedule gets an occurrence again: it counts toward max_schedules again."""


def is_retimed(changes: Any) -> bool:
    return bool(TIMING_FIELDS & set(changes))


async def prepare_update(
    uow: UnitOfWork,
    schedule: Schedule,
    definition: ScheduleDefinition,
    *,
    retimed: bool,
    limits: Entitlements,
    now: datetime,
) -> Replan:
    """Validate the schedule's new definition as PATCH does and work out the plan. A timing
    change (`retimed`; the caller holds the schedule's row lock, so the planner cannot plan under
    the old timing meanwhile) recomputes next_run_at from now and drops the runs planned ahead
    that are not the new timing's next occurrences; any other change keeps the plan position, so
    an occurrence the planner has not reached yet is not skipped by an unrelated edit."""
    ahead: list[datetime] = []
    if retimed:
        ahead = await uow.runs.unattempted_planned_after(schedule.tenant_id, schedule.id, now)
    counted = max(0, schedule.planned_runs - len(ahead))
    timing = await off_loop(validated, definition, limits, now, planned_runs=counted, new=retimed)
    if not retimed:
        return Replan(schedule.next_run_at)
    plan = await off_loop(retime, timing, now, counted_runs=counted, ahead=ahead)
    reopens = schedule.state is ScheduleState.COMPLETED and plan.next_run_at is not None
    return Replan(plan.next_run_at, plan.drop, reopens)


async def write_update(
    uow: UnitOfWork,
    schedule: Schedule,
    changes: dict[str, Any],
    replan: Replan,
    *,
    now: datetime,
    new_secret: SecretFactory | None,
    secret: str | None,
) -> str | None:
    """Store a validated update: delete the dropped planned runs, move the signing secret with
    the action (or store the supplied `secret`), apply the changes (version, `schedule.updated`)
    and save. Returns a secret generated because the schedule became a webhook, else None."""
    if replan.drop:
        schedule.planned_runs -= await uow.runs.delete_unattempted_planned(
            schedule.tenant_id, schedule.id, replan.drop
        )
    action = schedule.definition.with_changes(changes).action
    if secret is not None:
        supplied = secret
        new_secret = lambda: supplied  # noqa: E731
    shown = await follow_action(uow, schedule, action, new_secret)
    if secret is not None and shown is None:
        await uow.schedules.set_secret(
            schedule.tenant_id, schedule.id, secret, keep_previous_until=None
        )
    schedule.update(
        changes, next_run_at=replan.next_run_at, now=now, secret_changed=secret is not None
    )
    await uow.schedules.save(schedule)
    return None if secret is not None else shown


async def follow_action(
    uow: UnitOfWork, schedule: Schedule, action: Action, new_secret: SecretFactory | None
) -> str | None:
    """Give a schedule becoming a webhook its signing secret, take it from one becoming an event
    schedule (no grace: nothing is signed any more); the new secret, or None."""
    if action is schedule.definition.action:
        return None
    secret = None
    if action is Action.WEBHOOK:
        if new_secret is None:
            raise ValueError("new_secret is needed to make a schedule a webhook")
        secret = new_secret()
    await uow.schedules.set_secret(
        schedule.tenant_id, schedule.id, secret, keep_previous_until=None
    )
    return secret


# ---- delete ------------------------------------------------------------------------------------


async def write_delete(uow: UnitOfWork, schedule: Schedule, now: datetime) -> None:
    """Delete a loaded schedule (event `schedule.deleted`). Its runs planned ahead stay: the
    dispatcher skips each (`schedule_deleted`) when it comes due."""
    schedule.delete(now)
    await uow.schedules.save(schedule)


__all__ = [
    "Clock",
    "Replan",
    "SecretFactory",
    "check_secret",
    "compile_timing",
    "follow_action",
    "is_retimed",
    "new_schedule",
    "off_loop",
    "prepare_update",
    "validate_timing",
    "validated",
    "write_delete",
    "write_update",
]
