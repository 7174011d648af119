"""The one path by which a schedule is paused, whoever pauses it: the tenant through the API,
quota enforcement after a downgrade, the breaker after failures. The aggregate records
`schedule.paused`; the unit of work writes it (and the alert, if any) at commit."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from scheduler.domain.events import DomainEvent
from scheduler.domain.schedule import Schedule
from scheduler.service_layer.unit_of_work import UnitOfWork


async def pause(
    uow: UnitOfWork,
    schedule: Schedule,
    reason: str | None,
    now: datetime,
    *,
    alert: Callable[[Schedule], DomainEvent] | None = None,
) -> None:
    """Pause a schedule the unit of work loaded (or locked) and save it; `alert` builds the
    alert request from the paused schedule, which goes to the outbox with it."""
    schedule.pause(reason, now)
    await uow.schedules.save(schedule)
    if alert is not None:
        uow.add_event(alert(schedule))
