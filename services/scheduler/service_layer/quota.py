"""Quota enforcement (DESIGN.md §6, §9; the rules are in domain/tenant.py).

- `check_definition` / `check_resume`: min_interval_seconds (the engine's
  `Recurrence.min_interval_seconds()`), max_payload_bytes, and on resume max_schedules; each
  raises service_layer.errors.QuotaExceeded, which the API maps to problem+json.
- `ensure_writable`: a write by a suspended tenant raises TenantSuspended (reads still work).
- `pause_over_limit`: after a downgrade, every active schedule the new limits no longer allow is
  paused with paused_reason "quota" through the one pause path (service_layer/pausing.py), and
  ONE alert request per downgrade goes to `notification-requests` (template
  `schedule_quota_paused`, at most MAX_ALERT_SCHEDULES schedules listed). Paused schedules are
  not resumed automatically by an upgrade: resuming is the tenant's call (and `check_resume`
  applies the limits then).

This module does not import service_layer.schedules, so the schedule use cases may call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, Required, TypedDict, Unpack

from scheduler.domain.alerts import TEMPLATE_QUOTA_PAUSED, alert_request
from scheduler.domain.events import DomainEvent
from scheduler.domain.occurrences import Recurrence
from scheduler.domain.policies import DstPolicy, ScheduleState
from scheduler.domain.schedule import Schedule
from scheduler.domain.tenant import (
    DEFAULT_ENTITLEMENTS,
    PAUSED_REASON_QUOTA,
    Entitlements,
    QuotaViolation,
    ScheduleUsage,
    check_min_interval,
    check_payload_bytes,
    check_schedule_count,
    effective_entitlements,
    over_limit,
    payload_bytes,
)
from scheduler.service_layer.errors import QuotaExceeded, TenantSuspended
from scheduler.service_layer.pausing import pause
from scheduler.service_layer.unit_of_work import ListFilter, UnitOfWork
from servicekit.data.ids import stable_id

MAX_ALERT_SCHEDULES = 50  # schedules named in one alert; the count says how many in all
LIST_PAGE = 500  # schedules read per query when a downgrade checks a tenant
# The engine never produces gaps under a minute, so a limit at or below this cannot be broken
# and computing each schedule's smallest gap would be wasted work.
ENGINE_MIN_INTERVAL_SECONDS = 60
RECURRENCE_CACHE = 1024


async def pause_over_limit(
    uow: UnitOfWork, tenant_id: str, ent: Entitlements, now: datetime, cause: str
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
        await pause(uow, schedule, PAUSED_REASON_QUOTA, now)
        paused.append((schedule, violations[schedule_id]))
    if paused:
        uow.add_event(quota_alert(tenant_id, paused, ent, now, cause))
    return [s.id for s, _ in paused]


async def _live_schedules(uow: UnitOfWork, tenant_id: str) -> list[Schedule]:
    """The tenant's schedules that max_schedules counts: live and not completed (a completed
    one can never fire again, so it never ranks an active one out of the limit)."""
    out: list[Schedule] = []
    after: tuple[datetime, str] | None = None
    while True:
        page = list(
            await uow.schedules.list_page(
                tenant_id, limit=LIST_PAGE, after=after, filters=ListFilter()
            )
        )
        out.extend(s for s in page if s.state is not ScheduleState.COMPLETED)
        if len(page) < LIST_PAGE:
            return out
        after = (page[-1].created_at, page[-1].id)


@lru_cache(maxsize=RECURRENCE_CACHE)
def _min_interval(cron: str | None, timezone: str, dst_policy: DstPolicy) -> int | None:
    if cron is None:
        return None  # a one-shot has no gap
    try:
        return Recurrence.parse(cron, timezone, dst_policy).min_interval_seconds()
    except ValueError:
        return None  # a stored expression the engine now refuses is not planned anyway


def _usage(schedule: Schedule, ent: Entitlements) -> ScheduleUsage:
    interval = None
    if ent.min_interval_seconds > ENGINE_MIN_INTERVAL_SECONDS:
        timing = schedule.definition.timing
        interval = _min_interval(timing.cron, timing.timezone, timing.dst_policy)
    return ScheduleUsage(
        schedule_id=schedule.id,
        created_at=schedule.created_at,
        active=schedule.state is ScheduleState.ACTIVE and not schedule.is_deleted,
        payload_bytes=payload_bytes(schedule.definition.payload),
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
            "schedule_name": s.definition.name,
            "limit": v.key,
            "limit_value": v.limit,
            "current": v.current,
        }
        for s, v in paused[:MAX_ALERT_SCHEDULES]
    ]
    return alert_request(
        # One alert per entitlements event that paused something.
        id=stable_id("evt", tenant_id, "quota_paused", cause),
        tenant_id=tenant_id,
        schedule_id=first.id,
        template=TEMPLATE_QUOTA_PAUSED,
        data={
            "schedule_id": first.id,
            "schedule_name": first.definition.name,
            "paused_count": len(paused),
            "schedules": listed,
            "limits": ent.as_dict(),
            "schedules_path": "/v1/schedules/?state=paused",
        },
        now=now,
    )


def _raise(violation: QuotaViolation | None) -> None:
    if violation is not None:
        raise QuotaExceeded(violation.key, violation.limit, violation.current)


async def entitlements_for(
    uow: UnitOfWork, tenant_id: str, defaults: Entitlements = DEFAULT_ENTITLEMENTS
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
    engine's gap is only computed (tens of ms) when the limit is above its 60 s floor. A one-shot
    (no recurrence and no cron) has no gap to check."""
    _raise(check_payload_bytes(ent, payload_bytes(payload)))
    if ent.min_interval_seconds > ENGINE_MIN_INTERVAL_SECONDS:
        if recurrence is None:
            if cron is None:
                return
            if timezone is None:
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


def check_resume(ent: Entitlements, *, live_count: int, **definition: Unpack[Definition]) -> None:
    """Before resuming: refused while the tenant is over max_schedules (paused schedules count:
    delete some first) or the schedule itself breaks a limit."""
    _raise(check_schedule_count(ent, live_count))
    check_definition(ent, **definition)


async def is_suspended_at(uow: UnitOfWork, tenant_id: str, instant: datetime) -> bool:
    state = await uow.tenants.status(tenant_id)
    return state is not None and state.is_suspended_at(instant)


async def ensure_writable(uow: UnitOfWork, tenant_id: str, now: datetime) -> None:
    """Raise TenantSuspended when the tenant is suspended at `now`."""
    if await is_suspended_at(uow, tenant_id, now):
        raise TenantSuspended(tenant_id)


__all__ = [
    "MAX_ALERT_SCHEDULES",
    "check_definition",
    "check_resume",
    "ensure_writable",
    "entitlements_for",
    "is_suspended_at",
    "pause_over_limit",
    "quota_alert",
]
