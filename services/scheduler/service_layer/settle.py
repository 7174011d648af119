"""Settling: write a group of finished attempts (and releases, and claim-time skips) in ONE
transaction (DESIGN.md §6, §10: batched completion writes).

For each completion still held under its lease (`lock_owned`; a lost lease drops the write, the
new holder's result stands): the run's new state, its attempt row, its events (outbox). Then the
breaker, in the same transaction as the runs that moved it: every run that finished (succeeded
or failed) is applied in completion order to its schedule's count; a trip pauses a still-active
schedule with paused_reason "breaker", emits `schedule.paused` and an alert request
(`notification-requests`, template `schedule_auto_paused`). Only schedules with a failed run in
the group are read and locked; where every finished run succeeded the count can only end at 0,
which a conditional UPDATE writes (the common case touches no schedule row at all).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduler.domain.breaker import PAUSED_REASON_BREAKER, BreakerState, after_run_finished
from scheduler.domain.events import NOTIFICATION_REQUESTS_TOPIC, DomainEvent
from scheduler.domain.ids import stable_id
from scheduler.domain.policies import ScheduleState
from scheduler.domain.run import Attempt, Run, RunStatus
from scheduler.domain.schedule import Schedule
from scheduler.service_layer.run_ports import RunStore

ALERT_TEMPLATE_AUTO_PAUSED = "schedule_auto_paused"
ALERT_REQUESTED = "alert.requested"
_FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED)


@dataclass
class Completion:
    """A run moved in memory under `owner`'s lease, waiting to be written."""

    run: Run
    owner: str
    attempts: list[Attempt] = field(default_factory=list)
    events: list[DomainEvent] = field(default_factory=list)

    @classmethod
    def of(cls, run: Run, owner: str, extra_events: Sequence[DomainEvent] = ()) -> Completion:
        completion = cls(run, owner, list(run.new_attempts), [*run.events, *extra_events])
        run.new_attempts.clear()
        run.events.clear()
        return completion


@dataclass(frozen=True)
class SettleReport:
    settled: list[str]
    lost: list[str]
    """Runs whose lease was taken over: their write was dropped."""
    paused: list[str]
    """Schedules the breaker paused."""


def _last_error(run: Run, attempts: Sequence[Attempt]) -> str:
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
        owned = await tx.lock_owned([(c.run.id, c.owner) for c in completions])
        kept = [c for c in completions if c.run.id in owned]
        lost = [c.run.id for c in completions if c.run.id not in owned]
        await tx.write_runs([c.run for c in kept])
        await tx.insert_attempts([a for c in kept for a in c.attempts])
        events = [e for c in kept for e in c.events]
        paused: list[str] = []
        finished = [c for c in kept if c.run.status in _FINISHED]
        failing = {c.run.schedule_id for c in finished if c.run.status is RunStatus.FAILED}
        # Schedules whose runs here all succeeded end at count 0 whatever the order: one
        # conditional UPDATE, no schedule row read or locked unless its count was not 0.
        succeeded_only = {c.run.schedule_id for c in finished} - failing
        await tx.reset_consecutive_failures(sorted(succeeded_only))
        finished = [c for c in finished if c.run.schedule_id in failing]
        if finished:
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
                    events.append(alert_request(s, _last_error(c.run, c.attempts), now))
                    paused.append(s.id)
            await tx.save_breaker(list(changed.values()))
        await tx.add_events(events)
        await tx.commit()
    return SettleReport([c.run.id for c in kept], lost, paused)
