"""A schedule's timing (DESIGN.md §7a): a recurrence or a one-shot instant, its DST policy,
bounds, run limit and jitter. Pure: every instant comes in as an argument.

- `cron` or `run_at`, exactly one. A one-shot (`run_at`) has exactly one occurrence, at that
  instant (whole seconds).
- `start_at`: no occurrence before it; `end_at`: none after it; `max_runs`: at most that many
  planned occurrences (skipped ones included; the schedule counts them in `planned_runs`).
- `jitter_seconds`: a run's `due_at` = `scheduled_for` + an offset in [0, jitter_seconds] whole
  seconds, a hash of (schedule id, scheduled_for) only, so every planner, re-plan and restart
  computes the same instant. At most min(MAX_JITTER_SECONDS, the smallest gap - 1), so a run's
  due instant never passes the next occurrence.

`check_timing` raises `InvalidTiming` naming the field, for the API's 422s; `CompiledTiming`
answers occurrences within the bounds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from scheduler.domain.expression import InvalidScheduleExpression, load_zone
from scheduler.domain.occurrences import MAX_GAP_YEARS, Recurrence
from scheduler.domain.policies import DstAnnotation, DstPolicy

MAX_JITTER_SECONDS = 3600
# A one-shot's run_at may lie this far in the past (a request that took a moment still fires);
# further back is a mistake the API refuses.
RUN_AT_PAST_GRACE = timedelta(seconds=60)
_JUST_BEFORE = timedelta(microseconds=1)
# A preview (API) lists occurrences up to this far after its start, even when `count` asks for
# more: February 29 on a Sunday, 100 times, spans ~2,800 years, and each decade walked costs its
# zone offset table (~1-3 ms CPU, occurrences.py); no one plans a century ahead.
PREVIEW_HORIZON_YEARS = 100


class InvalidTiming(ValueError):
    """Timing fields that cannot be scheduled; names the field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class Timing:
    """When a schedule fires; part of its definition (domain/definition.py), so no defaults."""

    timezone: str
    cron: str | None
    run_at: datetime | None
    dst_policy: DstPolicy
    start_at: datetime | None
    end_at: datetime | None
    max_runs: int | None
    jitter_seconds: int

    def compile(self) -> CompiledTiming:
        """Parse the expression and zone; raises InvalidTiming (field cron, run_at or timezone)."""
        if (self.cron is None) == (self.run_at is None):
            raise InvalidTiming("cron", "give exactly one of cron and run_at")
        try:
            if self.cron is not None:
                recurrence = Recurrence.parse(self.cron, self.timezone, self.dst_policy)
                return CompiledTiming(self, recurrence)
            load_zone(self.timezone)
        except InvalidScheduleExpression as exc:
            if exc.field in {"timezone", "expression"}:
                # The field names itself already; only a cron sub-field (minute, ...) is kept.
                field = "timezone" if exc.field == "timezone" else "cron"
                raise InvalidTiming(field, exc.described) from None
            raise InvalidTiming("cron", str(exc)) from None
        return CompiledTiming(self, None)


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


class CompiledTiming:
    """Occurrences of a Timing within its bounds. Immutable; safe to share and cache."""

    __slots__ = ("_end", "_run_at", "_start", "_unbounded", "recurrence", "timing")

    def __init__(self, timing: Timing, recurrence: Recurrence | None) -> None:
        self.timing = timing
        self.recurrence = recurrence
        self._start = _utc(timing.start_at)
        self._end = _utc(timing.end_at)
        run_at = _utc(timing.run_at)
        self._run_at = None if run_at is None else run_at.replace(microsecond=0)
        # The recurrence's own occurrences, unchanged: next_after asks the engine directly.
        self._unbounded = recurrence is not None and (
            timing.start_at is None and timing.end_at is None and timing.max_runs is None
        )

    def iter_after(
        self, after: datetime, planned_runs: int = 0, until: datetime | None = None
    ) -> Iterator[datetime]:
        """Occurrences strictly after `after` within the bounds (and at or before `until`),
        given `planned_runs` already planned (for max_runs). Datetimes in the schedule's zone."""
        left = None if self.timing.max_runs is None else self.timing.max_runs - planned_runs
        if left is not None and left <= 0:
            return
        after = after.astimezone(UTC)
        if self._start is not None and after < self._start:
            after = self._start - _JUST_BEFORE  # the engine floors to whole seconds
        zone = load_zone(self.timing.timezone)
        end = self._end
        if until is not None:
            end = until.astimezone(UTC) if end is None else min(end, until.astimezone(UTC))
        if self.recurrence is None:
            candidates: Iterator[datetime] = iter(
                [self._run_at.astimezone(zone)]
                if self._run_at is not None and self._run_at > after
                else []
            )
        else:
            # end_at bounds the walk itself, not only what it yields (a sparse or starved
            # expression must not walk decades past end_at).
            candidates = self.recurrence.iter_after(after, end)
        for occurrence in candidates:
            if end is not None and occurrence > end:
                return
            yield occurrence
            if left is not None:
                left -= 1
                if left <= 0:
                    return

    def iter_unbounded(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """The occurrences in (after, until] ignoring start_at, end_at and max_runs: what the
        recurrence (or a one-shot's run_at) puts there, DST policy applied. The ledger lists them
        and says why the bounds left some unplanned (domain/ledger.py)."""
        if self.recurrence is not None:
            yield from self.recurrence.iter_after(after, until)
        elif self._run_at is not None and after < self._run_at <= until:
            yield self._run_at.astimezone(load_zone(self.timing.timezone))

    def next_after(self, after: datetime, planned_runs: int = 0) -> datetime | None:
        if self._unbounded:  # the planner asks once per schedule and pass
            assert self.recurrence is not None
            return self.recurrence.next_after(after)
        return next(self.iter_after(after, planned_runs), None)

    def first_after(self, now: datetime, planned_runs: int = 0) -> datetime | None:
        """The next occurrence to plan from `now` on create, PATCH or resume: a one-shot whose
        run_at lies within RUN_AT_PAST_GRACE before `now` still fires."""
        return next(self.iter_from(now, planned_runs), None)

    def iter_from(self, now: datetime, planned_runs: int = 0) -> Iterator[datetime]:
        """The occurrences to plan from `now` on, the first being `first_after`'s."""
        since = now - RUN_AT_PAST_GRACE if self.recurrence is None else now
        return self.iter_after(since, planned_runs)

    def annotate(self, occurrence: datetime) -> DstAnnotation | None:
        return None if self.recurrence is None else self.recurrence.annotate(occurrence)

    def min_interval_seconds(self, since: datetime | None = None) -> int | None:
        """The smallest gap between occurrences (None for a one-shot: it has no gap)."""
        return None if self.recurrence is None else self.recurrence.min_interval_seconds(since)

    def due_at(self, schedule_id: str, scheduled_for: datetime) -> datetime:
        """`scheduled_for` plus this schedule's deterministic jitter offset."""
        if self.timing.jitter_seconds <= 0:
            return scheduled_for
        return scheduled_for + timedelta(
            seconds=jitter_offset(schedule_id, scheduled_for, self.timing.jitter_seconds)
        )


def jitter_offset(schedule_id: str, scheduled_for: datetime, jitter_seconds: int) -> int:
    """Whole seconds in [0, jitter_seconds], from (schedule id, scheduled_for as a UTC instant)
    only: the same on every replica, after a re-plan and across restarts."""
    if jitter_seconds <= 0:
        return 0
    instant = int(scheduled_for.timestamp())
    digest = hashlib.sha256(f"{schedule_id}|{instant}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (jitter_seconds + 1)


def check_timing(
    timing: Timing, now: datetime, *, planned_runs: int = 0, new: bool = True
) -> CompiledTiming:
    """Every rule of DESIGN.md §7a that the request shape cannot express; raises InvalidTiming
    naming the field. `new`: the timing fields were given or changed in this request (then bounds
    that leave no occurrence are refused; an unrelated edit of a completed schedule is not)."""
    for name in ("run_at", "start_at", "end_at"):
        value = getattr(timing, name)
        if value is not None and (value.tzinfo is None or value.utcoffset() is None):
            raise InvalidTiming(name, "needs an offset or Z (RFC 3339)")
    compiled = timing.compile()
    if timing.max_runs is not None and timing.max_runs < 1:
        raise InvalidTiming("max_runs", "must be at least 1")
    if timing.jitter_seconds < 0:
        raise InvalidTiming("jitter_seconds", "must be at least 0")
    if (
        timing.start_at is not None
        and timing.end_at is not None
        and timing.end_at <= timing.start_at
    ):
        raise InvalidTiming("end_at", "must be after start_at")
    if new and timing.run_at is not None and timing.run_at < now - RUN_AT_PAST_GRACE:
        raise InvalidTiming("run_at", f"is more than {RUN_AT_PAST_GRACE.seconds} s in the past")
    if new and compiled.first_after(now, planned_runs) is None:
        if timing.run_at is not None:
            field = "run_at"
        elif timing.max_runs is not None and planned_runs >= timing.max_runs:
            field = "max_runs"
        elif timing.end_at is not None and timing.end_at < _gap_horizon(timing, now):
            field = "end_at"
        else:
            assert timing.cron is not None  # a one-shot answered above
            # The engine gives up after MAX_GAP_YEARS without an occurrence (occurrences.py).
            raise InvalidTiming(
                "cron",
                f"fires less than once in {MAX_GAP_YEARS} years: no occurrence within "
                f"{MAX_GAP_YEARS} years after {'start_at' if _starts_later(timing, now) else 'now'}"
                f" with dst_policy {timing.dst_policy.value}",
            )
        raise InvalidTiming(field, "leaves no occurrence after now within start_at and end_at")
    if timing.jitter_seconds > 0:
        gap = compiled.min_interval_seconds(since=now)
        ceiling = MAX_JITTER_SECONDS if gap is None else min(MAX_JITTER_SECONDS, gap - 1)
        if timing.jitter_seconds > ceiling:
            why = "" if gap is None else f" (the schedule's smallest gap is {gap} s)"
            raise InvalidTiming("jitter_seconds", f"must be at most {ceiling}{why}")
    return compiled


def _starts_later(timing: Timing, now: datetime) -> bool:
    return timing.start_at is not None and timing.start_at > now


def _gap_horizon(timing: Timing, now: datetime) -> datetime:
    """Where a walk from now (or a later start_at) gives up: MAX_GAP_YEARS later, in days as the
    engine counts them (a lower bound: the engine's walk goes slightly further)."""
    since = timing.start_at if timing.start_at is not None and _starts_later(timing, now) else now
    return since + timedelta(days=MAX_GAP_YEARS * 365)


@dataclass(frozen=True)
class AnnotatedOccurrence:
    """One item of a preview (DESIGN.md §7a): the occurrence in the schedule's zone, how DST
    touched it, and its due instant when the schedule has jitter (else None)."""

    at: datetime
    dst: DstAnnotation | None
    due_at: datetime | None


def annotated_occurrences(
    compiled: CompiledTiming,
    *,
    schedule_id: str,
    after: datetime,
    count: int,
    planned_runs: int = 0,
    until: datetime | None = None,
) -> list[AnnotatedOccurrence]:
    """Up to `count` occurrences after `after`, within PREVIEW_HORIZON_YEARS of it; with
    `until`, only those at or before it (the walk stops there, so a short range costs what it
    holds, whatever `count`)."""
    horizon = _years_after(after, PREVIEW_HORIZON_YEARS)
    if horizon is not None and (until is None or horizon < until):
        until = horizon
    out: list[AnnotatedOccurrence] = []
    jitter = compiled.timing.jitter_seconds > 0
    for occurrence in compiled.iter_after(after, planned_runs, until):
        if len(out) >= count:
            break
        due = compiled.due_at(schedule_id, occurrence) if jitter else None
        out.append(AnnotatedOccurrence(occurrence, compiled.annotate(occurrence), due))
    return out


def _years_after(when: datetime, years: int) -> datetime | None:
    """`when` plus `years` of 365 days; None past the calendar's end (year 9999)."""
    try:
        return when + timedelta(days=365 * years)
    except OverflowError:
        return None
