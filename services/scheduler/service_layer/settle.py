"""Settling: write a group of finished attempts (and releases, and claim-time skips) in ONE
transaction (DESIGN.md §6, §10: batched completion writes).

For each completion still held under its lease (`write_owned`, a compare-and-set on the lease; a
lost lease drops the write, the new holder's result stands): the run's new state, its attempt
rows, its events (outbox); on PostgreSQL one statement for all of them. Then the
breaker, in the same transaction as the runs that moved it: every run that finished (succeeded
or failed) is applied in completion order to its schedule's count; a trip pauses a still-active
schedule with paused_reason "breaker", emits `schedule.paused` and an alert request
(`notification-requests`, template `schedule_auto_paused`). Only schedules with a failed run in
the group are read and locked; where every finished run succeeded the count can only end at 0,
which a conditional UPDATE writes (the common case touches no schedule row at all).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.domain.breaker import PAUSED_REASON_BREAKER, BreakerState, after_run_finished
from scheduler.domain.events import NOTIFICATION_REQUESTS_TOPIC, DomainEvent
from scheduler.domain.ids import stable_id
from scheduler.domain.policies import ScheduleState
from scheduler.domain.run import Attempt, RunStatus
from scheduler.domain.schedule import Schedule
from scheduler.service_layer.run_ports import Completion, RunStore

__all__ = ["Completion", "SettleReport", "alert_request", "settle_completions"]

ALERT_TEMPLATE_AUTO_PAUSED = "schedule_auto_paused"
ALERT_REQUESTED = "alert.requested"
_FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED)


@dataclass(frozen=True)
class SettleReport:
    settled: list[str]
    lost: list[str]
    """Runs whose lease was taken over: their write was dropped."""
    paused: list[str]
    """Schedules the breaker paused."""


def _last_error(attempts: Sequence[Attempt]) -> str:
    if not attempts:
        return "unknown"
    last = attempts[-1]
    text = last.error_kind or "error"
    if last.error_message:
        text = f"{text}: {last.error_message}"
    return text


def alert_request(schedule: Schedule, last_error: str, now: datetime) -> DomainEvent:
    """The alert request the notification service turns into email and in-app alerts."""
    data: dict[str, Any] = {
        "tenant_id": schedule.tenant_id,
        "channels": ["email", "in_app"],
        "template": ALERT_TEMPLATE_AUTO_PAUSED,
        "data": {
            "schedule_id": schedule.id,
            "schedule_name": schedule.name,
            "last_error": last_error,
            "runs_path": f"/v1/schedules/{schedule.id}/runs",
        },
    }
    return DomainEvent(
        # One alert per pause (the version after pausing names the pause).
        id=stable_id("evt", schedule.id, "auto_paused", str(schedule.version)),
        type=ALERT_REQUESTED,
        tenant_id=schedule.tenant_id,
        time=now,
        schedule_id=schedule.id,
        data=data,
        topic=NOTIFICATION_REQUESTS_TOPIC,
    )


async def settle_completions(
    store: RunStore, completions: Sequence[Completion], now: datetime
) -> SettleReport:
    if not completions:
        return SettleReport([], [], [])
    async with store.transaction() as tx:
        # Lease check, run states, attempts, events and the all-succeeded breaker reset (a
        # schedule whose runs here all succeeded ends at count 0 whatever the order) in one go.
        owned = await tx.write_owned(completions)
        kept = [c for c in completions if c.run.id in owned]
        lost = [c.run.id for c in completions if c.run.id not in owned]
        paused: list[str] = []
        failing = {c.run.schedule_id for c in kept if c.run.status is RunStatus.FAILED}
        # The rare case: schedules with a failed run, read and locked, applied in order.
        finished = [c for c in kept if c.run.schedule_id in failing and c.run.status in _FINISHED]
        if finished:
            events: list[DomainEvent] = []
            schedules = await tx.lock_schedules([c.run.schedule_id for c in finished])
            changed: dict[str, Schedule] = {}
            for c in finished:
                s = schedules.get(c.run.schedule_id)
                if s is None:
                    continue
                decision = after_run_finished(
                    BreakerState(s.consecutive_failures), c.run.status, s.breaker.failure_threshold
                )
                if decision.consecutive_failures != s.consecutive_failures:
                    s.consecutive_failures = decision.consecutive_failures
                    changed[s.id] = s
                if decision.trip and s.state is ScheduleState.ACTIVE and not s.is_deleted:
                    s.pause(PAUSED_REASON_BREAKER, now)
                    changed[s.id] = s
                    events.extend(s.events)
                    s.events.clear()
                    events.append(alert_request(s, _last_error(c.attempts), now))
                    paused.append(s.id)
            await tx.save_breaker(list(changed.values()))
            await tx.add_events(events)
        await tx.commit()
    return SettleReport([c.run.id for c in kept], lost, paused)
