"""Tenant state use cases: apply platform-events and billing-entitlements to the projections, and
enforce them (DESIGN.md §6, §9; the rules are in domain/tenant.py).

Applying (the consumer calls `apply_events` once per polled batch, in ONE transaction):
- Each event is deduplicated by its envelope `id` in `processed_events` (same transaction as its
  effect, so a redelivered batch changes nothing twice).
- `tenant.suspended` / `tenant.reinstated` update `tenant_status` order-safely.
- `entitlements.updated` replaces `tenant_entitlements`; when the new limits apply, every active
  schedule they no longer allow is paused with paused_reason "quota" through the Schedule
  aggregate (so `schedule.paused` goes to the outbox) and ONE alert request per downgrade goes
  to `notification-requests` (template `schedule_quota_paused`, at most MAX_ALERT_SCHEDULES
  schedules listed). Paused schedules are not resumed automatically by an upgrade: resuming is
  the tenant's call (and `check_resume` applies the limits then).
- An envelope of another type is recorded as processed and ignored; an event with invalid limits
  is recorded as processed, logged and ignored (one bad event must not stall the topic).

This module does not import service_layer.schedules, so the schedule use cases may call it.

Enforcing (the API and workers call these; each raises service_layer.errors.QuotaExceeded or
TenantSuspended, which the API maps to problem+json):
- `check_create` / `check_update` / `check_resume`: max_schedules (live count), min_interval_seconds
  (the engine's `Recurrence.min_interval_seconds()`), max_payload_bytes.
- `ensure_writable`: a write by a suspended tenant raises TenantSuspended (reads still work).
- `runs_allowed_today`, `is_suspended_at`, `entitlements_for`: exact reads for the planner, the
  dispatcher and the API.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Required, TypedDict, TypeVar, Unpack

from scheduler.domain.events import NOTIFICATION_REQUESTS_TOPIC, DomainEvent
from scheduler.domain.ids import stable_id
from scheduler.domain.occurrences import Recurrence
from scheduler.domain.policies import ScheduleState
from scheduler.domain.schedule import Schedule
from scheduler.domain.tenant import (
    DEFAULT_ENTITLEMENTS,
    ENTITLEMENTS_UPDATED,
    PAUSED_REASON_QUOTA,
    TENANT_REINSTATED,
    TENANT_SUSPENDED,
    Entitlements,
    EntitlementsRecord,
    InvalidLimits,
    QuotaViolation,
    ScheduleUsage,
    SuspensionState,
    apply_suspension_event,
    check_min_interval,
    check_payload_bytes,
    check_schedule_count,
    effective_entitlements,
    over_limit,
    parse_limits,
    payload_bytes,
    quota_day,
    runs_remaining,
)
from scheduler.domain.tenant import apply_entitlements_event as _entitlements_after
from scheduler.service_layer.errors import QuotaExceeded, ServiceError
from scheduler.service_layer.unit_of_work import ListFilter, UnitOfWork

log = logging.getLogger("scheduler.tenant_state")

ALERT_TEMPLATE_QUOTA_PAUSED = "schedule_quota_paused"
ALERT_REQUESTED = "alert.requested"
MAX_ALERT_SCHEDULES = 50  # schedules named in one alert; the count says how many in all
LIST_PAGE = 500  # schedules read per query when a downgrade checks a tenant
# The engine never produces gaps under a minute, so a limit at or below this cannot be broken
# and computing each schedule's smallest gap would be wasted work.
ENGINE_MIN_INTERVAL_SECONDS = 60
RECURRENCE_CACHE = 1024

P = TypeVar("P", SuspensionState, EntitlementsRecord)  # a projection row


class TenantSuspended(ServiceError):
    """The tenant is suspended: writes are refused (403 `.../tenant-suspended`); reads work."""

    def __init__(self, tenant_id: str) -> None:
        super().__init__("the tenant is suspended; schedules can be read but not changed")
        self.tenant_id = tenant_id


# ---- ports ------------------------------------------------------------------------------------


class TenantRepository(abc.ABC):
    """The projections' storage, in the unit of work's transaction.

    `status` / `entitlements` with `lock=True` lock the row until commit (PostgreSQL: FOR
    UPDATE) so two consumers of one tenant serialise; `insert_*_if_absent` return False when a
    concurrent writer created the row first (the caller then locks and re-applies).
    """

    @abc.abstractmethod
    async def status(self, tenant_id: str, *, lock: bool = False) -> SuspensionState | None: ...

    @abc.abstractmethod
    async def insert_status_if_absent(
        self, tenant_id: str, state: SuspensionState, now: datetime
    ) -> bool: ...

    @abc.abstractmethod
    async def update_status(
        self, tenant_id: str, state: SuspensionState, now: datetime
    ) -> None: ...

    @abc.abstractmethod
    async def entitlements(
        self, tenant_id: str, *, lock: bool = False
    ) -> EntitlementsRecord | None: ...

    @abc.abstractmethod
    async def insert_entitlements_if_absent(
        self, tenant_id: str, record: EntitlementsRecord, now: datetime
    ) -> bool: ...

    @abc.abstractmethod
    async def update_entitlements(
        self, tenant_id: str, record: EntitlementsRecord, now: datetime
    ) -> None: ...

    @abc.abstractmethod
    async def mark_processed(self, event_id: str, now: datetime) -> bool:
        """Record an event id; False if it was already recorded (a duplicate)."""

    @abc.abstractmethod
    async def prune_processed(self, before: datetime, limit: int) -> int:
        """Forget up to `limit` event ids processed before `before`; how many were forgotten."""

    @abc.abstractmethod
    async def count_runs(self, tenant_id: str, start: datetime, end: datetime) -> int:
        """The tenant's non-skipped runs with start <= scheduled_for < end."""


class TenantUnitOfWork(UnitOfWork):
    """The schedule unit of work plus the projections and alert requests (written to the outbox
    with the schedules' events at commit)."""

    tenants: TenantRepository
    alerts: list[DomainEvent]

    def collect_new_events(self) -> list[DomainEvent]:
        events = super().collect_new_events()
        events.extend(self.alerts)
        self.alerts = []
        return events


# ---- applying events --------------------------------------------------------------------------


@dataclass
class BatchReport:
    applied: int = 0
    """Events that changed a projection."""
    unchanged: int = 0
    """Stale, duplicate-by-time or of another type: recorded, no effect."""
    duplicates: int = 0
    """Already processed (same event id)."""
    invalid: int = 0
    paused: list[str] = field(default_factory=list)
    """Schedules paused by downgrades."""


def _event_time(event: Mapping[str, Any]) -> datetime:
    value = datetime.fromisoformat(str(event["time"]))
    if value.tzinfo is None:
        raise ValueError(f"event time {event['time']!r} has no UTC offset")
    return value


async def _apply_to_projection(
    *,
    read: Callable[[], Awaitable[P | None]],
    after: Callable[[P | None], P | None],
    insert_if_absent: Callable[[P], Awaitable[bool]],
    update: Callable[[P], Awaitable[None]],
) -> P | None:
    """Apply one event to a tenant's projection row: read it locked, compute the row after the
    event, store it. None when the event changes nothing (stale or duplicate by time). When a
    concurrent writer created the row first (insert refused), lock theirs and apply again."""
    current = await read()
    new = after(current)
    if new is None:
        return None
    if current is None:
        if await insert_if_absent(new):
            return new
        new = after(await read())
        if new is None:
            return None
    await update(new)
    return new


async def apply_platform_event(
    uow: TenantUnitOfWork, event: Mapping[str, Any], now: datetime
) -> bool:
    """Apply one `tenant.suspended` / `tenant.reinstated` inside an open unit of work; True when
    it changed the projection."""
    tenant_id = str(event["tenant_id"])
    suspended = event["type"] == TENANT_SUSPENDED
    at, event_id = _event_time(event), str(event["id"])
    new = await _apply_to_projection(
        read=lambda: uow.tenants.status(tenant_id, lock=True),
        after=lambda current: apply_suspension_event(
            current, suspended=suspended, time=at, event_id=event_id
        ),
        insert_if_absent=lambda state: uow.tenants.insert_status_if_absent(tenant_id, state, now),
        update=lambda state: uow.tenants.update_status(tenant_id, state, now),
    )
    return new is not None


async def apply_entitlements_event(
    uow: TenantUnitOfWork,
    event: Mapping[str, Any],
    now: datetime,
    defaults: Entitlements = DEFAULT_ENTITLEMENTS,
) -> list[str] | None:
    """Apply one `entitlements.updated` inside an open unit of work. None when it changed nothing;
    otherwise the ids of the schedules it paused. Raises InvalidLimits for a malformed event."""
    tenant_id = str(event["tenant_id"])
    data = event.get("data")
    limits = parse_limits(data.get("limits") if isinstance(data, Mapping) else None)
    at, event_id = _event_time(event), str(event["id"])
    new = await _apply_to_projection(
        read=lambda: uow.tenants.entitlements(tenant_id, lock=True),
        after=lambda current: _entitlements_after(
            current, limits=limits, time=at, event_id=event_id
        ),
        insert_if_absent=lambda record: uow.tenants.insert_entitlements_if_absent(
            tenant_id, record, now
        ),
        update=lambda record: uow.tenants.update_entitlements(tenant_id, record, now),
    )
    if new is None:
        return None
    return await pause_over_limit(uow, tenant_id, new.effective(defaults), now, new.event_id)


async def pause_over_limit(
    uow: TenantUnitOfWork, tenant_id: str, ent: Entitlements, now: datetime, cause: str
) -> list[str]:
    """Pause (reason "quota") every active schedule `ent` no longer allows; one alert request."""
    live = await _live_schedules(uow, tenant_id)
    usage = [_usage(s, ent) for s in live]
    violations = over_limit(ent, usage)
    if not violations:
        return []
    by_id = {s.id: s for s in live}
    paused: list[tuple[Schedule, QuotaViolation]] = []
    for schedule_id in sorted(violations, key=lambda i: (by_id[i].created_at, i)):
        # get() makes the unit of work track the aggregate, so its schedule.paused is collected.
        schedule = await uow.schedules.get(tenant_id, schedule_id)
        if schedule is None or schedule.state is not ScheduleState.ACTIVE:
            continue
        schedule.pause(PAUSED_REASON_QUOTA, now)
        await uow.schedules.save(schedule)
        paused.append((schedule, violations[schedule_id]))
    if paused:
        uow.alerts.append(quota_alert(tenant_id, paused, ent, now, cause))
    return [s.id for s, _ in paused]


async def _live_schedules(uow: UnitOfWork, tenant_id: str) -> list[Schedule]:
    out: list[Schedule] = []
    after: tuple[datetime, str] | None = None
    while True:
        page = list(
            await uow.schedules.list_page(
                tenant_id, limit=LIST_PAGE, after=after, filters=ListFilter()
            )
        )
        out.extend(page)
        if len(page) < LIST_PAGE:
            return out
        after = (page[-1].created_at, page[-1].id)


@lru_cache(maxsize=RECURRENCE_CACHE)
def _min_interval(cron: str, timezone: str) -> int | None:
    try:
        return Recurrence.parse(cron, timezone).min_interval_seconds()
    except ValueError:
        return None  # a stored expression the engine now refuses is not planned anyway


def _usage(schedule: Schedule, ent: Entitlements) -> ScheduleUsage:
    interval = None
    if ent.min_interval_seconds > ENGINE_MIN_INTERVAL_SECONDS:
        interval = _min_interval(schedule.cron, schedule.timezone)
    return ScheduleUsage(
        schedule_id=schedule.id,
        created_at=schedule.created_at,
        active=schedule.state is ScheduleState.ACTIVE and not schedule.is_deleted,
        payload_bytes=payload_bytes(schedule.payload),
        min_interval_seconds=interval,
    )


def quota_alert(
    tenant_id: str,
    paused: Sequence[tuple[Schedule, QuotaViolation]],
    ent: Entitlements,
    now: datetime,
    cause: str,
) -> DomainEvent:
    """One alert request for a downgrade (DESIGN §9 `notification-requests` shape)."""
    first = paused[0][0]
    listed = [
        {
            "schedule_id": s.id,
            "schedule_name": s.name,
            "limit": v.key,
            "limit_value": v.limit,
            "current": v.current,
        }
        for s, v in paused[:MAX_ALERT_SCHEDULES]
    ]
    data: dict[str, Any] = {
        "tenant_id": tenant_id,
        "channels": ["email", "in_app"],
        "template": ALERT_TEMPLATE_QUOTA_PAUSED,
        "data": {
            "schedule_id": first.id,
            "schedule_name": first.name,
            "paused_count": len(paused),
            "schedules": listed,
            "limits": ent.as_dict(),
            "schedules_path": "/v1/schedules/?state=paused",
        },
    }
    return DomainEvent(
        # One alert per entitlements event that paused something.
        id=stable_id("evt", tenant_id, "quota_paused", cause),
        type=ALERT_REQUESTED,
        tenant_id=tenant_id,
        time=now,
        schedule_id=first.id,
        data=data,
        topic=NOTIFICATION_REQUESTS_TOPIC,
    )


async def apply_events(
    uow: TenantUnitOfWork,
    events: Sequence[Mapping[str, Any]],
    now: datetime,
    defaults: Entitlements = DEFAULT_ENTITLEMENTS,
) -> BatchReport:
    """Apply decoded envelopes in order, deduplicated by id, in ONE transaction."""
    report = BatchReport()
    async with uow:
        for event in events:
            event_id = str(event["id"])
            if not await uow.tenants.mark_processed(event_id, now):
                report.duplicates += 1
                continue
            kind = event.get("type")
            try:
                if kind in (TENANT_SUSPENDED, TENANT_REINSTATED):
                    changed = await apply_platform_event(uow, event, now)
                elif kind == ENTITLEMENTS_UPDATED:
                    paused = await apply_entitlements_event(uow, event, now, defaults)
                    changed = paused is not None
                    report.paused.extend(paused or [])
                else:
                    changed = False
            except (InvalidLimits, ValueError, KeyError) as exc:
                log.warning("tenant event %s (%s) ignored: %s", event_id, kind, exc)
                report.invalid += 1
                continue
            if changed:
                report.applied += 1
            else:
                report.unchanged += 1
        await uow.commit()
    return report


# ---- enforcing --------------------------------------------------------------------------------


def _raise(violation: QuotaViolation | None) -> None:
    if violation is not None:
        raise QuotaExceeded(violation.key, violation.limit, violation.current)


async def entitlements_for(
    uow: TenantUnitOfWork, tenant_id: str, defaults: Entitlements = DEFAULT_ENTITLEMENTS
) -> Entitlements:
    """The tenant's effective limits (an open unit of work; reads without locking)."""
    record = await uow.tenants.entitlements(tenant_id)
    return effective_entitlements(record, defaults)


def check_definition(
    ent: Entitlements,
    *,
    cron: str | None = None,
    timezone: str | None = None,
    recurrence: Recurrence | None = None,
    payload: Any,
    since: datetime | None = None,
) -> None:
    """min_interval_seconds (from the engine, never by parsing strings; over the horizon from
    `since`) and max_payload_bytes. Pass the parsed `recurrence`, or `cron` and `timezone`. The
    engine's gap is only computed (tens of ms) when the limit is above its 60 s floor."""
    _raise(check_payload_bytes(ent, payload_bytes(payload)))
    if ent.min_interval_seconds > ENGINE_MIN_INTERVAL_SECONDS:
        if recurrence is None:
            if cron is None or timezone is None:
                raise TypeError("check_definition needs a recurrence, or cron and timezone")
            recurrence = Recurrence.parse(cron, timezone)
        _raise(check_min_interval(ent, recurrence.min_interval_seconds(since=since)))


class Definition(TypedDict, total=False):
    """check_definition's keywords: `payload`, and `recurrence` or `cron` and `timezone`."""

    cron: str | None
    timezone: str | None
    recurrence: Recurrence | None
    payload: Required[Any]
    since: datetime | None


def check_create(ent: Entitlements, *, live_count: int, **definition: Unpack[Definition]) -> None:
    """Before creating: `live_count` is the tenant's live schedules now (the new one adds 1)."""
    _raise(check_schedule_count(ent, live_count + 1))
    check_definition(ent, **definition)


def check_update(ent: Entitlements, **definition: Unpack[Definition]) -> None:
    """Before updating: the schedule's resulting cron, zone and payload."""
    check_definition(ent, **definition)


def check_resume(ent: Entitlements, *, live_count: int, **definition: Unpack[Definition]) -> None:
    """Before resuming: refused while the tenant is over max_schedules (paused schedules count:
    delete some first) or the schedule itself breaks a limit."""
    _raise(check_schedule_count(ent, live_count))
    check_definition(ent, **definition)


async def is_suspended_at(uow: TenantUnitOfWork, tenant_id: str, instant: datetime) -> bool:
    state = await uow.tenants.status(tenant_id)
    return state is not None and state.is_suspended_at(instant)


async def ensure_writable(uow: TenantUnitOfWork, tenant_id: str, now: datetime) -> None:
    """Raise TenantSuspended when the tenant is suspended at `now`."""
    if await is_suspended_at(uow, tenant_id, now):
        raise TenantSuspended(tenant_id)


async def runs_allowed_today(
    uow: TenantUnitOfWork,
    tenant_id: str,
    day: datetime,
    defaults: Entitlements = DEFAULT_ENTITLEMENTS,
) -> int:
    """Runs the tenant may still have in the UTC day containing `day` (max_runs_per_day minus its
    non-skipped runs scheduled in that day)."""
    ent = await entitlements_for(uow, tenant_id, defaults)
    start, end = quota_day(day)
    return runs_remaining(ent, await uow.tenants.count_runs(tenant_id, start, end))


__all__ = [
    "ALERT_TEMPLATE_QUOTA_PAUSED",
    "BatchReport",
    "TenantRepository",
    "TenantSuspended",
    "TenantUnitOfWork",
    "apply_entitlements_event",
    "apply_events",
    "apply_platform_event",
    "check_create",
    "check_definition",
    "check_resume",
    "check_update",
    "ensure_writable",
    "entitlements_for",
    "is_suspended_at",
    "pause_over_limit",
    "runs_allowed_today",
]
