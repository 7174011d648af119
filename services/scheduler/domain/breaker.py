"""The per-schedule failure breaker (DESIGN.md §6): after `failure_threshold` consecutive failed
runs the schedule is paused with `paused_reason: "breaker"`.

Counting, by the order in which runs *finish* (the order the service layer applies them):
- `failed` adds one; every run counts, whatever its trigger (schedule, manual, replay);
- `succeeded` resets to zero;
- `skipped` neither counts nor resets: nothing was learned about the target (misfire, overlap,
  quota and suspension say nothing about whether the endpoint works);
- resuming the schedule resets to zero (`after_resume`).

`trip` is True whenever a failure leaves the count at or above the threshold;
`count_finished_run` applies one run to a Schedule and says whether to pause it now (only if
it is still active and live, so a straggler failure after the pause is harmless). The service
layer (service_layer/breaker.py) pauses it through the one pause path, with `breaker_alert`, in
the same transaction as the run that tripped it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduler.domain.alerts import TEMPLATE_AUTO_PAUSED, alert_request
from scheduler.domain.events import DomainEvent
from scheduler.domain.policies import BREAKER_THRESHOLD_RANGE, ScheduleState
from scheduler.domain.run import Attempt, RunStatus
from scheduler.domain.schedule import Schedule
from servicekit.data.ids import stable_id

PAUSED_REASON_BREAKER = "breaker"


@dataclass(frozen=True)
class BreakerState:
    consecutive_failures: int = 0

    def __post_init__(self) -> None:
        if self.consecutive_failures < 0:
            raise ValueError("consecutive_failures must be >= 0")


@dataclass(frozen=True)
class BreakerDecision:
    consecutive_failures: int
    """Store this as the schedule's new count."""
    trip: bool
    """Pause the schedule (if still active) with paused_reason "breaker"."""

    @property
    def state(self) -> BreakerState:
        return BreakerState(self.consecutive_failures)


def after_run_finished(
    state: BreakerState, run_status: RunStatus, threshold: int
) -> BreakerDecision:
    """Apply one finished run to the breaker. Raises ValueError for a run that is not finished
    or a threshold outside the policy's bounds."""
    lo, hi = BREAKER_THRESHOLD_RANGE
    if not lo <= threshold <= hi:
        raise ValueError(f"threshold must be between {lo} and {hi}")
    status = RunStatus(run_status)
    if not status.is_terminal:
        raise ValueError(f"run status {status} is not finished")
    if status is RunStatus.SUCCEEDED:
        return BreakerDecision(0, trip=False)
    if status is RunStatus.SKIPPED:
        return BreakerDecision(state.consecutive_failures, trip=False)
    # Cap the stored count: past the threshold the number carries no more information.
    count = min(state.consecutive_failures + 1, hi)
    return BreakerDecision(count, trip=count >= threshold)


def after_resume() -> BreakerState:
    """Resume (by the tenant or an operator) starts counting afresh."""
    return BreakerState(0)


def count_finished_run(schedule: Schedule, run_status: RunStatus) -> bool:
    """Apply one finished run to the schedule's count; True when the breaker trips a schedule
    that is still active and live (the caller pauses it with PAUSED_REASON_BREAKER)."""
    decision = after_run_finished(
        BreakerState(schedule.consecutive_failures),
        run_status,
        schedule.definition.policies.breaker.failure_threshold,
    )
    schedule.consecutive_failures = decision.consecutive_failures
    return decision.trip and schedule.state is ScheduleState.ACTIVE and not schedule.is_deleted


def last_error(attempts: Sequence[Attempt]) -> str:
    """What the alert says went wrong: the last attempt's error kind and message."""
    if not attempts:
        return "unknown"
    last = attempts[-1]
    text = last.error_kind or "error"
    if last.error_message:
        text = f"{text}: {last.error_message}"
    return text


def breaker_alert(
    schedule: Schedule,
    error: str,
    now: datetime,
    *,
    run_id: str | None = None,
    attempt: Attempt | None = None,
) -> DomainEvent:
    """The alert request of a breaker pause; call it after pausing (the paused version names
    the pause, so one pause alerts once). `run_id` and `attempt`: the run that tripped it and
    its last attempt, so the alert can link the run and quote the receiver's answer."""
    return alert_request(
        id=stable_id("evt", schedule.id, "auto_paused", str(schedule.version)),
        tenant_id=schedule.tenant_id,
        schedule_id=schedule.id,
        template=TEMPLATE_AUTO_PAUSED,
        data={
            "schedule_id": schedule.id,
            "schedule_name": schedule.definition.name,
            "last_error": error,
            "runs_path": f"/v1/schedules/{schedule.id}/runs",
            # How many failed in a row (the wording differs for one) and the threshold.
            "consecutive_failures": schedule.consecutive_failures,
            "failure_threshold": schedule.definition.policies.breaker.failure_threshold,
            "resume_path": f"/v1/schedules/{schedule.id}/resume",
            "run_id": run_id,
            "status_code": None if attempt is None else attempt.status_code,
            # At most 1 KiB (webhookdeliver's bound): the receiver's text, never our secret.
            "response_excerpt": None if attempt is None else attempt.response_excerpt,
        },
        now=now,
    )
