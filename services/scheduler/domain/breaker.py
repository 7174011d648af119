"""The per-schedule failure breaker (DESIGN.md §6): after `failure_threshold` consecutive failed
runs the schedule is paused with `paused_reason: "breaker"`.

Counting, by the order in which runs *finish* (the order the service layer applies them):
- `failed` adds one; every run counts, whatever its trigger (schedule, manual, replay);
- `succeeded` resets to zero;
- `skipped` neither counts nor resets: nothing was learned about the target (misfire, overlap,
  quota and suspension say nothing about whether the endpoint works);
- resuming the schedule resets to zero (`after_resume`).

`trip` is True whenever a failure leaves the count at or above the threshold; the service layer
pauses the schedule (and emits `schedule.paused`) only if it is still active, in the same
transaction as the run that tripped it, so a straggler failure after the pause is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.domain.policies import BREAKER_THRESHOLD_RANGE
from scheduler.domain.run import RunStatus

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
