"""Tenant events applied to the projections (DESIGN.md §6, §9; the rules are in
domain/tenant.py). The consumer calls `apply_events` once per polled batch, in ONE unit of work:

- Each event is deduplicated by its envelope `id` in `processed_events` (same transaction as its
  effect, so a redelivered batch changes nothing twice).
- `tenant.suspended` / `tenant.reinstated` update `tenant_status` order-safely.
- `entitlements.updated` replaces `tenant_entitlements`; when the new limits apply, every active
  schedule they no longer allow is paused (service_layer/quota.pause_over_limit).
- `destination.held` from notification (`"origin": "notification"`) holds the destination for
  the scheduler's runs too (service_layer/flow_control.apply_hold); the scheduler's own
  destination events, which it publishes for notification, are skipped unrecorded.
- An envelope of another type is recorded as processed and ignored; an event with invalid limits
  is recorded as processed, logged and ignored (one bad event must not stall the topic).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from scheduler.domain.destination_holds import is_foreign_hold, parse_hold
from scheduler.domain.events import DESTINATION_DELETED, DESTINATION_HELD, DESTINATION_UPDATED
from scheduler.domain.tenant import (
    DEFAULT_ENTITLEMENTS,
    ENTITLEMENTS_UPDATED,
    TENANT_REINSTATED,
    TENANT_SUSPENDED,
    Entitlements,
    EntitlementsRecord,
    InvalidLimits,
    SuspensionState,
    apply_suspension_event,
    parse_limits,
)
from scheduler.domain.tenant import apply_entitlements_event as _entitlements_after
from scheduler.service_layer.flow_control import apply_hold
from scheduler.service_layer.quota import pause_over_limit
from scheduler.service_layer.unit_of_work import UnitOfWork

log = logging.getLogger("scheduler.tenant_events")
DESTINATION_TYPES = (DESTINATION_UPDATED, DESTINATION_DELETED, DESTINATION_HELD)

P = TypeVar("P", SuspensionState, EntitlementsRecord)  # a projection row


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


async def apply_platform_event(uow: UnitOfWork, event: Mapping[str, Any], now: datetime) -> bool:
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
    uow: UnitOfWork,
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


async def apply_events(
    uow: UnitOfWork,
    events: Sequence[Mapping[str, Any]],
    now: datetime,
    defaults: Entitlements = DEFAULT_ENTITLEMENTS,
) -> BatchReport:
    """Apply decoded envelopes in order, deduplicated by id, in ONE transaction."""
    report = BatchReport()
    async with uow:
        for event in events:
            if event.get("type") in DESTINATION_TYPES and not is_foreign_hold(event):
                report.unchanged += 1  # the scheduler's own, for notification
                continue
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
                elif is_foreign_hold(event):
                    changed = await apply_hold(uow, parse_hold(event), now)
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


__all__ = [
    "BatchReport",
    "apply_entitlements_event",
    "apply_events",
    "apply_platform_event",
]
