"""Schedule use cases. Each takes a fresh unit of work and the calling tenant; none knows HTTP."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from scheduler.domain.definition import ScheduleDefinition
from scheduler.domain.policies import Action, ScheduleState
from scheduler.domain.schedule import Schedule, ScheduleDeleted
from scheduler.domain.tenant import Entitlements, check_schedule_count
from scheduler.domain.timing import (
    AnnotatedOccurrence,
    CompiledTiming,
    Timing,
    annotated_occurrences,
)
from scheduler.service_layer.errors import (
    DuplicateKey,
    IdempotencyConflict,
    InvalidInput,
    KeyConflict,
    NotAWebhook,
    NotFound,
    QuotaExceeded,
    ScheduleIsCompleted,
    VersionMismatch,
)
from scheduler.service_layer.pausing import pause
from scheduler.service_layer.quota import check_definition, check_resume
from scheduler.service_layer.run_ports import RunSummary
from scheduler.service_layer.schedule_writes import (
    Clock,
    SecretFactory,
    check_secret,
    compile_timing,
    is_retimed,
    new_schedule,
    off_loop,
    prepare_update,
    validate_timing,
    validated,
    write_delete,
    write_update,
)
from scheduler.service_layer.unit_of_work import IdempotencyRecord, ListFilter, UnitOfWork
from servicekit.data.pagination import encode_cursor, parse_cursor

MAX_OCCURRENCES_PREVIEW = 100
# A stateless preview has no schedule id yet: its due_at shows the jitter of this stand-in id,
# so the offset is an example (the stored schedule's own id decides the real one).
PREVIEW_SCHEDULE_ID = "sch_preview"

LimitsProvider = Callable[[str], Entitlements]
"""A tenant's effective limits (the tenant projection cache's `entitlements`)."""


@dataclass(frozen=True)
class Created:
    schedule: Schedule
    secret: str | None
    """The signing secret; None for an event schedule (nothing is signed, nothing is stored)."""
    replayed: bool


@dataclass(frozen=True)
class Updated:
    schedule: Schedule
    secret: str | None
    """The new signing secret when this update made an event schedule a webhook, else None."""


@dataclass(frozen=True)
class Put:
    """What `PUT /v1/schedules/by-key/{key}` did: created (then `secret` is the generated one,
    or None when supplied or an event schedule), updated (`changed` names the fields), or
    nothing (`changed` empty, nothing written)."""

    schedule: Schedule
    created: bool
    changed: tuple[str, ...]
    secret: str | None


@dataclass(frozen=True)
class Page:
    items: list[Schedule]
    next_cursor: str | None
    runs: Mapping[str, RunSummary] = field(default_factory=dict)
    """Each listed schedule's last finished and next planned run, by schedule id."""


def request_hash(body: Mapping[str, Any]) -> str:
    """Canonical hash of a create request (key order and whitespace do not matter)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


async def create_schedule(
    uow: UnitOfWork,
    definition: ScheduleDefinition,
    *,
    tenant_id: str,
    clock: Clock,
    new_secret: SecretFactory,
    limits: Entitlements,
    idempotency_key: str | None = None,
    body_hash: str | None = None,
    key: str | None = None,
    secret: str | None = None,
) -> Created:
    """Create a schedule. With an Idempotency-Key: the same key and body return the first result
    (`replayed=True`, same secret: the client may have lost the first response); the same key
    with another body is IdempotencyConflict. Two racing twins: the loser replays the winner.
    `key`: the tenant's id for it (KeyConflict when a live schedule has it); `secret`: a signing
    secret the tenant supplied instead of a generated one (`Created.secret` is then None: it is
    never returned)."""
    now = clock()
    check_secret(definition, secret)
    timing = await off_loop(validated, definition, limits, now)
    if secret is not None:
        supplied = secret
        new_secret = lambda: supplied  # noqa: E731
    for attempt in range(2):
        try:
            return await _create_once(
                uow,
                definition,
                timing,
                tenant_id,
                clock,
                new_secret,
                limits,
                idempotency_key,
                body_hash,
                key,
                hide_secret=secret is not None,
            )
        except DuplicateKey:
            if attempt == 1 or idempotency_key is None:
                raise
    raise AssertionError("unreachable")


async def _create_once(
    uow: UnitOfWork,
    definition: ScheduleDefinition,
    timing: CompiledTiming,
    tenant_id: str,
    clock: Clock,
    new_secret: SecretFactory,
    limits: Entitlements,
    idempotency_key: str | None,
    body_hash: str | None,
    key: str | None,
    *,
    hide_secret: bool,
) -> Created:
    async with uow:
        if idempotency_key is not None:
            previous = await uow.idempotency.get(tenant_id, idempotency_key)
            if previous is not None:
                if previous.request_hash != body_hash:
                    raise IdempotencyConflict(idempotency_key)
                existing = await uow.schedules.get(tenant_id, previous.schedule_id)
                if existing is None:  # deleted since: the key stays spent
                    raise IdempotencyConflict(idempotency_key)
                secrets = await uow.schedules.secrets(tenant_id, existing.id, clock())
                shown = secrets[0] if secrets and not hide_secret else None
                return Created(existing, shown, replayed=True)
        # The tenant's schedule writes that change its count take turns (apply too), so
        # max_schedules holds under concurrent creates.
        await uow.schedules.lock_tenant(tenant_id)
        count = await uow.schedules.count_live(tenant_id)
        if count >= limits.max_schedules:
            raise QuotaExceeded("max_schedules", limits.max_schedules, count + 1)
        now = clock()
        schedule, secret = new_schedule(
            definition,
            tenant_id=tenant_id,
            next_run_at=await off_loop(timing.first_after, now),
            now=now,
            key=key,
            new_secret=new_secret,
        )
        await uow.schedules.add(schedule, secret)
        if idempotency_key is not None:
            await uow.idempotency.add(
                tenant_id,
                idempotency_key,
                IdempotencyRecord(request_hash=body_hash or "", schedule_id=schedule.id),
                now,
            )
        await uow.commit()
        return Created(schedule, None if hide_secret else secret, replayed=False)


async def put_schedule_by_key(
    uow_factory: Callable[[], UnitOfWork],
    definition: ScheduleDefinition,
    *,
    tenant_id: str,
    key: str,
    secret: str | None,
    clock: Clock,
    new_secret: SecretFactory,
    limits: Entitlements,
) -> Put:
    """Create the tenant's schedule with this key, or bring it to `definition` (and the supplied
    `secret`, which replaces the current one). Nothing changed: nothing is written, so version,
    updated_at and the outbox stay. A change goes the PATCH way (`update_schedule`: version,
    `schedule.updated`, a timing change re-plans). Two racing creates of one key: the loser
    reads the winner's schedule and answers as an update (usually "unchanged")."""
    check_secret(definition, secret)
    for attempt in range(2):
        async with uow_factory() as uow:
            existing = await uow.schedules.get_by_key(tenant_id, key)
            current = None
            if existing is not None and secret is not None:
                found = await uow.schedules.secrets(tenant_id, existing.id, clock())
                current = found[0] if found else None
        if existing is None:
            try:
                created = await create_schedule(
                    uow_factory(),
                    definition,
                    tenant_id=tenant_id,
                    clock=clock,
                    new_secret=new_secret,
                    limits=limits,
                    key=key,
                    secret=secret,
                )
            except KeyConflict:
                if attempt == 1:
                    raise
                continue
            return Put(created.schedule, True, (), created.secret)
        changes = existing.definition.changes_to(definition)
        new_key = secret is not None and (
            current is None or not hmac.compare_digest(current.encode(), secret.encode())
        )
        if not changes and not new_key:
            return Put(existing, False, (), None)
        try:
            updated = await update_schedule(
                uow_factory(),
                tenant_id=tenant_id,
                schedule_id=existing.id,
                changes=changes,
                expected_version=existing.version,
                clock=clock,
                limits=limits,
                new_secret=new_secret,
                secret=secret if new_key else None,
            )
        except VersionMismatch:
            # A concurrent writer got there first: compare against what it wrote, once.
            if attempt == 1:
                raise
            continue
        changed = tuple(sorted({*changes, "secret"} if new_key else changes))
        return Put(updated.schedule, False, changed, updated.secret)
    raise AssertionError("unreachable")


async def get_schedule(uow: UnitOfWork, *, tenant_id: str, schedule_id: str) -> Schedule:
    async with uow:
        return await _load(uow, tenant_id, schedule_id)


async def get_schedule_with_runs(
    uow: UnitOfWork, *, tenant_id: str, schedule_id: str
) -> tuple[Schedule, RunSummary]:
    """The schedule and its RunSummary, read in one transaction."""
    async with uow:
        schedule = await _load(uow, tenant_id, schedule_id)
        summaries = await uow.runs.run_summaries(tenant_id, [schedule.id])
    return schedule, summaries.get(schedule.id, RunSummary())


async def run_summary(uow: UnitOfWork, *, tenant_id: str, schedule_id: str) -> RunSummary:
    """A schedule's RunSummary after a write (the write's own response shows it)."""
    async with uow:
        summaries = await uow.runs.run_summaries(tenant_id, [schedule_id])
    return summaries.get(schedule_id, RunSummary())


async def list_schedules(
    uow: UnitOfWork,
    *,
    tenant_id: str,
    limit: int,
    cursor: str | None,
    filters: ListFilter,
) -> Page:
    """One page ordered by (created_at, id). The cursor is the last item's key, so rows inserted
    later (later created_at) never shift or repeat what a client already saw."""
    after = parse_cursor(cursor).key if cursor else None
    async with uow:
        rows = list(
            await uow.schedules.list_page(tenant_id, limit=limit + 1, after=after, filters=filters)
        )
        items = rows[:limit]
        summaries = await uow.runs.run_summaries(tenant_id, [s.id for s in items])
    more = len(rows) > limit
    next_cursor = encode_cursor(items[-1].created_at, items[-1].id) if more and items else None
    return Page(items, next_cursor, summaries)


async def update_schedule(
    uow: UnitOfWork,
    *,
    tenant_id: str,
    schedule_id: str,
    changes: Mapping[str, Any],
    expected_version: int | None,
    clock: Clock,
    limits: Entitlements,
    new_secret: SecretFactory | None = None,
    secret: str | None = None,
) -> Updated:
    """Partial update. An action change moves the signing secret with it: event -> webhook
    generates one (`new_secret`, returned once in `Updated.secret`), webhook -> event drops the
    stored one. A timing change (TIMING_FIELDS) is validated as create validates it and
    recomputes next_run_at from now; on a completed schedule it makes it active again when an
    occurrence is left (then it counts toward max_schedules again). It holds the schedule's row
    lock, so the planner cannot plan under the old timing meanwhile, and deletes the runs planned
    ahead that are not the new timing's next occurrences (domain/retime.py). `secret`: a
    tenant-supplied signing secret that replaces the current one at once (no grace: the tenant
    chose it and knows when its receiver has it); never returned."""
    retimed = is_retimed(changes)
    async with uow:
        schedule = await _load(uow, tenant_id, schedule_id)
        if retimed:
            schedule = await _relock(uow, schedule)
        _check_version(schedule, expected_version)
        definition = schedule.definition.with_changes(changes)
        now = clock()
        replan = await prepare_update(
            uow, schedule, definition, retimed=retimed, limits=limits, now=now
        )
        if replan.reopens:
            # Active again, it counts toward max_schedules again.
            live = await uow.schedules.count_live(tenant_id)
            violation = check_schedule_count(limits, live + 1)
            if violation is not None:
                raise QuotaExceeded(violation.key, violation.limit, violation.current)
        check_secret(definition, secret)
        shown = await write_update(
            uow, schedule, dict(changes), replan, now=now, new_secret=new_secret, secret=secret
        )
        await uow.commit()
        return Updated(schedule, shown)


async def pause_schedule(
    uow: UnitOfWork,
    *,
    tenant_id: str,
    schedule_id: str,
    reason: str | None,
    expected_version: int | None,
    clock: Clock,
) -> Schedule:
    async with uow:
        schedule = await _load(uow, tenant_id, schedule_id)
        _check_version(schedule, expected_version)
        if schedule.state is ScheduleState.COMPLETED:
            raise ScheduleIsCompleted(schedule.id)
        await pause(uow, schedule, reason, clock())
        await uow.commit()
        return schedule


async def resume_schedule(
    uow: UnitOfWork,
    *,
    tenant_id: str,
    schedule_id: str,
    expected_version: int | None,
    clock: Clock,
    limits: Entitlements | None = None,
) -> Schedule:
    """Resume a paused schedule; refused (QuotaExceeded) while the tenant is over max_schedules
    or the schedule itself breaks a limit (e.g. paused by a downgrade)."""
    async with uow:
        schedule = await _load(uow, tenant_id, schedule_id)
        _check_version(schedule, expected_version)
        if schedule.state is ScheduleState.COMPLETED:
            raise ScheduleIsCompleted(schedule.id)
        if schedule.state is ScheduleState.PAUSED:
            now = clock()
            timing = compile_timing(schedule.definition.timing)
            if limits is not None:
                await off_loop(
                    check_resume,
                    limits,
                    live_count=await uow.schedules.count_live(tenant_id),
                    recurrence=timing.recurrence,
                    payload=schedule.definition.payload,
                    since=now,
                )
            next_run_at = await off_loop(timing.first_after, now, schedule.planned_runs)
            schedule.resume(next_run_at, now)
            await uow.schedules.save(schedule)
            await uow.commit()
        return schedule


async def delete_schedule(
    uow: UnitOfWork,
    *,
    tenant_id: str,
    schedule_id: str,
    expected_version: int | None,
    clock: Clock,
) -> None:
    async with uow:
        schedule = await _load(uow, tenant_id, schedule_id)
        _check_version(schedule, expected_version)
        await write_delete(uow, schedule, clock())
        await uow.commit()


async def rotate_secret(
    uow: UnitOfWork,
    *,
    tenant_id: str,
    schedule_id: str,
    clock: Clock,
    new_secret: SecretFactory,
    grace: timedelta,
) -> tuple[Schedule, str]:
    """New current secret; the old one keeps signing alongside until now + grace. NotAWebhook for
    an event schedule (it has no secret)."""
    async with uow:
        schedule = await _load(uow, tenant_id, schedule_id)
        if schedule.definition.action is not Action.WEBHOOK:
            raise NotAWebhook(schedule.id)
        now = clock()
        secret = new_secret()
        await uow.schedules.set_secret(
            tenant_id, schedule_id, secret, keep_previous_until=now + grace if grace else None
        )
        schedule.secret_rotated(now)
        await uow.schedules.save(schedule)
        await uow.commit()
        return schedule, secret


def _check_count(count: int) -> None:
    if not 1 <= count <= MAX_OCCURRENCES_PREVIEW:
        raise InvalidInput("count", f"must be between 1 and {MAX_OCCURRENCES_PREVIEW}")


async def preview_occurrences(
    uow: UnitOfWork, *, tenant_id: str, schedule_id: str, count: int, clock: Clock
) -> tuple[Schedule, list[AnnotatedOccurrence]]:
    """The next `count` occurrences after now, annotated (DESIGN.md §7a), within the bounds and
    the runs max_runs still allows; none for a paused or completed schedule's past ("after
    next_run_at's predecessor" would need the planner; "after now" is what a tenant means).
    Runs already planned ahead of now are among them, so they are not counted as used up."""
    _check_count(count)
    now = clock()
    async with uow:
        schedule = await _load(uow, tenant_id, schedule_id)
        ahead = 0
        if schedule.definition.timing.max_runs is not None:
            ahead = await uow.runs.planned_after(tenant_id, schedule.id, now)
    timing = compile_timing(schedule.definition.timing)
    items = await off_loop(
        annotated_occurrences,
        timing,
        schedule_id=schedule.id,
        after=now,
        count=count,
        planned_runs=max(0, schedule.planned_runs - ahead),
    )
    return schedule, items


def preview_timing(
    timing: Timing,
    *,
    after: datetime | None,
    count: int,
    clock: Clock,
    limits: Entitlements,
) -> list[AnnotatedOccurrence]:
    """The stateless preview (`POST /v1/schedules/preview`): validated exactly as create
    validates the same fields (the timing rules and the tenant's limits on them, e.g.
    min_interval_seconds), stores nothing. CPU-bound: call it through `off_loop`."""
    _check_count(count)
    now = clock()
    compiled = validate_timing(timing, now)
    check_definition(limits, recurrence=compiled.recurrence, payload=None, since=now)
    return annotated_occurrences(
        compiled,
        schedule_id=PREVIEW_SCHEDULE_ID,
        after=now if after is None else after,
        count=count,
    )


async def _load(uow: UnitOfWork, tenant_id: str, schedule_id: str) -> Schedule:
    schedule = await uow.schedules.get(tenant_id, schedule_id)
    if schedule is None or schedule.is_deleted:
        raise NotFound("schedule", schedule_id)
    return schedule


async def _relock(uow: UnitOfWork, schedule: Schedule) -> Schedule:
    """The tenant's schedule (already loaded by `_load`) read again under its row lock."""
    locked = (await uow.schedules.lock([schedule.id])).get(schedule.id)
    if locked is None or locked.is_deleted:
        raise NotFound("schedule", schedule.id)
    return locked


def _check_version(schedule: Schedule, expected: int | None) -> None:
    if expected is not None and expected != schedule.version:
        raise VersionMismatch(schedule.version)


# Clock, SecretFactory, compile_timing, off_loop and validate_timing live in schedule_writes.py
# and are re-exported: callers import them from here.
__all__ = [
    "Clock",
    "Created",
    "Page",
    "Put",
    "ScheduleDeleted",
    "SecretFactory",
    "Updated",
    "compile_timing",
    "create_schedule",
    "delete_schedule",
    "get_schedule",
    "list_schedules",
    "off_loop",
    "pause_schedule",
    "preview_occurrences",
    "preview_timing",
    "put_schedule_by_key",
    "request_hash",
    "resume_schedule",
    "rotate_secret",
    "update_schedule",
    "validate_timing",
]
