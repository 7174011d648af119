"""Planning: which occurrences of one schedule become runs in one planner pass (DESIGN.md §6).

Pure: `plan_occurrences` takes the schedule's plan state, `now` and the occurrence function and
returns a `PlanningDecision`; the planner inserts one run per occurrence (`to_run`) and stores
`decision.next_run_at` in the same transaction. The unique key (schedule_id, scheduled_for) makes
a second run for an occurrence impossible; this function makes it unnecessary: it only
materialises occurrences at or after the stored `next_run_at` and moves `next_run_at` strictly
past every one it materialised, so no sequence of passes (any `now`, even going backwards across
replicas) plans an occurrence twice, and none is skipped over without a row.

Rules, in this order, for each occurrence `t` from `next_run_at` up to `now + lookahead`:

1. Tenant suspended at `t` (only asked for `t <= now`; a run planned ahead is judged by the
   dispatcher when it comes due) -> skipped `tenant_suspended`.
2. Missed (`now - t > misfire_grace`): `fire_all` -> pending; `skip` -> skipped `misfire`;
   `fire_once` -> pending only for the latest missed occurrence (the next one is not missed),
   the others skipped `misfire`. A planner merely a few seconds late is within the grace and
   fires normally. A run planned ahead (`t > now`) that is claimed late (an outage after it
   was planned) is judged the same way by the dispatcher (domain/claiming.py rule 5).
3. Overlap (`overlap_policy` skip): an occurrence already due (`t <= now`) while the previous run
   is unfinished -> skipped `overlap`. A pending run created earlier in the same pass counts as
   unfinished. Occurrences planned ahead (`t > now`) are not judged here, because the previous run
   may well finish before `t`: the dispatcher must check overlap when it claims such a run and
   call `Run.skip(SkipReason.OVERLAP, ...)`.
4. Quota: once `runs_allowed_today` pending runs have been planned in this pass -> skipped
   `quota`. Skipped rows never consume the budget. The caller passes the tenant's remaining
   allowance for the quota day of `now` (the day the pass creates its runs in: each one counts
   there, an occurrence past midnight included) and subtracts `decision.pending_count` before
   planning the tenant's next schedule.

Timing (DESIGN.md §7a): `next_after` already honours start_at, end_at and a one-shot's run_at;
`runs_left` (max_runs minus the occurrences planned before) stops the pass after that many, skipped
ones included, and then `next_run_at` is None: the schedule is complete. Jitter does not move
`scheduled_for` (the occurrence's identity); `to_run` gets the run's `due_at` from the caller.

Bound: one pass materialises at most `max_per_pass` occurrences (a schedule down for a month at
*/1 has 43,200 missed occurrences: each is recorded, skipped or not, but over many short
transactions). `decision.more_due` is then True and the planner should plan the schedule again at
once; `next_run_at` already points at the first occurrence left over, so nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.domain.policies import MisfirePolicy, OverlapPolicy
from scheduler.domain.run import Run, RunStatus, SkipReason, Trigger

# The one default of how far ahead the planner materialises runs (PlanningSettings and
# SCHEDULER_PLANNER_LOOKAHEAD_SECONDS default to it): runs exist before they are due, so dispatch
# starts on time.
DEFAULT_LOOKAHEAD = timedelta(seconds=60)
DEFAULT_MISFIRE_GRACE = timedelta(seconds=60)  # later than this, an occurrence counts as missed
DEFAULT_MAX_PER_PASS = 1000  # rows per schedule per transaction; more_due says "plan again"
MAX_LOOKAHEAD = timedelta(hours=1)  # beyond this, planned-ahead runs would pile up needlessly
_ZERO = timedelta(0)

NextAfter = Callable[[datetime], datetime | None]
"""The schedule's occurrence function: the first occurrence strictly after an instant, or None."""


@dataclass(frozen=True)
class PlanState:
    """What the planner knows of one schedule when it plans it (an active schedule only: paused
    schedules are not planned at all)."""

    next_run_at: datetime | None
    """The first occurrence not yet materialised as a run; None when the schedule has no more."""
    misfire_policy: MisfirePolicy
    overlap_policy: OverlapPolicy = OverlapPolicy.ALLOW
    previous_run_unfinished: bool = False
    """Whether the schedule's latest run is pending, in_progress or retrying."""
    runs_left: int | None = None
    """Occurrences max_runs still allows (None: no limit)."""


@dataclass(frozen=True)
class PlannedOccurrence:
    scheduled_for: datetime
    status: RunStatus
    """PENDING or SKIPPED."""
    skip_reason: SkipReason | None = None

    def to_run(
        self,
        *,
        tenant_id: str,
        schedule_id: str,
        now: datetime,
        payload: Mapping[str, Any] | None = None,
        due_at: datetime | None = None,
        schedule_version: int | None = None,
    ) -> Run:
        if self.status is RunStatus.SKIPPED:
            assert self.skip_reason is not None
            return Run.skipped(
                tenant_id=tenant_id,
                schedule_id=schedule_id,
                scheduled_for=self.scheduled_for,
                now=now,
                reason=self.skip_reason,
                schedule_version=schedule_version,
            )
        return Run.planned(
            tenant_id=tenant_id,
            schedule_id=schedule_id,
            scheduled_for=self.scheduled_for,
            now=now,
            trigger=Trigger.SCHEDULE,
            payload=payload,
            due_at=due_at,
            schedule_version=schedule_version,
        )


@dataclass(frozen=True)
class PlanningDecision:
    occurrences: tuple[PlannedOccurrence, ...]
    """In increasing scheduled_for order; one run row each."""
    next_run_at: datetime | None
    """Store this as the schedule's next_run_at (None: no occurrence left, ever)."""
    more_due: bool
    """The per-pass bound stopped the pass early: occurrences up to the horizon remain."""

    @property
    def pending_count(self) -> int:
        return sum(1 for o in self.occurrences if o.status is RunStatus.PENDING)


def _aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")


def _check_bounds(
    lookahead: timedelta,
    misfire_grace: timedelta,
    max_per_pass: int,
    runs_allowed_today: int | None,
) -> None:
    if not _ZERO <= lookahead <= MAX_LOOKAHEAD:
        raise ValueError(f"lookahead must be between 0 and {MAX_LOOKAHEAD}")
    if misfire_grace < _ZERO:
        raise ValueError("misfire_grace must be >= 0")
    if max_per_pass < 1:
        raise ValueError("max_per_pass must be >= 1")
    if runs_allowed_today is not None and runs_allowed_today < 0:
        raise ValueError("runs_allowed_today must be >= 0")


def _next_of(next_after: NextAfter, t: datetime) -> datetime | None:
    """`next_after(t)` in UTC, checked to move strictly forward."""
    nxt = next_after(t)
    if nxt is None:
        return None
    _aware("next_after(...)", nxt)
    nxt = nxt.astimezone(UTC)
    if nxt <= t:
        raise ValueError(f"next_after({t.isoformat()}) returned {nxt.isoformat()}")
    return nxt


def plan_occurrences(
    state: PlanState,
    *,
    now: datetime,
    next_after: NextAfter,
    lookahead: timedelta = DEFAULT_LOOKAHEAD,
    misfire_grace: timedelta = DEFAULT_MISFIRE_GRACE,
    max_per_pass: int = DEFAULT_MAX_PER_PASS,
    tenant_suspended_at: Callable[[datetime], bool] | None = None,
    runs_allowed_today: int | None = None,
) -> PlanningDecision:
    """Decide the runs for occurrences in [state.next_run_at, now + lookahead] (rules above).

    `tenant_suspended_at(instant)` answers from the suspension projection (None: never
    suspended); `runs_allowed_today` is the remaining daily budget (None: unlimited).
    Raises ValueError if `next_after` does not move strictly forward.
    """
    _aware("now", now)
    _check_bounds(lookahead, misfire_grace, max_per_pass, runs_allowed_today)
    # Compare instants in UTC only: Python compares two datetimes that share a tzinfo by wall time
    # and ignores `fold`, so in a repeated (fall-back) hour the second pass would look earlier.
    now = now.astimezone(UTC)
    horizon = now + lookahead
    missed_before = now - misfire_grace  # an occurrence earlier than this was missed
    budget = runs_allowed_today
    unfinished = state.previous_run_unfinished
    out: list[PlannedOccurrence] = []
    t = state.next_run_at
    if t is not None:
        _aware("next_run_at", t)
        t = t.astimezone(UTC)
    left = state.runs_left
    if left is not None and left <= 0:
        t = None
    while t is not None and t <= horizon and len(out) < max_per_pass:
        nxt = _next_of(next_after, t) if left is None or len(out) + 1 < left else None
        reason: SkipReason | None = None
        if t <= now and tenant_suspended_at is not None and tenant_suspended_at(t):
            reason = SkipReason.TENANT_SUSPENDED
        elif t < missed_before and (
            state.misfire_policy is MisfirePolicy.SKIP
            # fire_once: not the latest missed one, since a later occurrence is missed too.
            or (
                state.misfire_policy is MisfirePolicy.FIRE_ONCE
                and nxt is not None
                and nxt < missed_before
            )
        ):
            reason = SkipReason.MISFIRE
        elif state.overlap_policy is OverlapPolicy.SKIP and unfinished and t <= now:
            reason = SkipReason.OVERLAP
        elif budget is not None and budget <= 0:
            reason = SkipReason.QUOTA
        if reason is None:
            out.append(PlannedOccurrence(t, RunStatus.PENDING))
            unfinished = True
            if budget is not None:
                budget -= 1
        else:
            out.append(PlannedOccurrence(t, RunStatus.SKIPPED, reason))
        t = nxt
    more_due = t is not None and t <= horizon
    return PlanningDecision(occurrences=tuple(out), next_run_at=t, more_due=more_due)
