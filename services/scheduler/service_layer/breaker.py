"""The breaker in the settle transaction: the domain decides (domain/breaker.py), this applies.

Every run that finished (succeeded or failed) is applied in completion order to its schedule's
count; a trip pauses the schedule through the one pause path (service_layer/pausing.py) with
paused_reason "breaker" and an alert request (template `schedule_auto_paused`). Only schedules
with a failed run in the group come here, read and locked; where every finished run succeeded
the count can only end at 0, which the settle write itself stores
(`RunRepository.settle_leased`), so the common case touches no schedule row at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial

from scheduler.domain.breaker import (
    PAUSED_REASON_BREAKER,
    breaker_alert,
    count_finished_run,
    last_error,
)
from scheduler.domain.schedule import Schedule
from scheduler.service_layer.pausing import pause
from scheduler.service_layer.run_ports import Completion
from scheduler.service_layer.unit_of_work import UnitOfWork


async def apply_breaker(
    uow: UnitOfWork, finished: Sequence[Completion], now: datetime
) -> list[str]:
    """Apply finished runs (written in this unit of work) to their schedules' breakers; the ids
    of the schedules it paused."""
    if not finished:
        return []
    schedules = await uow.schedules.lock([c.run.schedule_id for c in finished])
    counted: dict[str, Schedule] = {}
    paused: list[str] = []
    for c in finished:
        schedule = schedules.get(c.run.schedule_id)
        if schedule is None:
            continue
        before = schedule.consecutive_failures
        if count_finished_run(schedule, c.run.status):
            error = last_error(c.attempts)
            attempt = c.attempts[-1] if c.attempts else None
            alert = partial(breaker_alert, error=error, now=now, run_id=c.run.id, attempt=attempt)
            await pause(uow, schedule, PAUSED_REASON_BREAKER, now, alert=alert)
            counted.pop(schedule.id, None)
            paused.append(schedule.id)
        elif schedule.consecutive_failures != before:
            counted[schedule.id] = schedule
    for schedule in counted.values():
        await uow.schedules.save(schedule)
    return paused
