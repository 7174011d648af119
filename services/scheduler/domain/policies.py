"""A schedule's policies: value objects with their bounds (DESIGN.md §5-§6).

Bounds carry their unit and reason; the API validates against them and the domain relies on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class MisfirePolicy(StrEnum):
    """What to do with occurrences missed while the scheduler was down or behind."""

    FIRE_ALL = "fire_all"
    """Run every missed occurrence, late."""
    FIRE_ONCE = "fire_once"
    """Run the latest missed occurrence; record the others as skipped (misfire)."""
    SKIP = "skip"
    """Record every missed occurrence as skipped (misfire)."""


class OverlapPolicy(StrEnum):
    """What to do when an occurrence comes while the previous run is unfinished."""

    ALLOW = "allow"
    """Run concurrently."""
    SKIP = "skip"
    """Record the new occurrence as skipped (overlap)."""
    BUFFER_ONE = "buffer_one"
    """The next occurrence waits for the previous run and starts when it finishes; at most one
    waits, the others meanwhile are skipped (overlap)."""


class DstPolicy(StrEnum):
    """What a *fixed* schedule does when DST touches one of its wall times (DESIGN.md §7a);
    wildcard schedules fire at every matching real instant under all three."""

    SHIFT = "shift"
    """A skipped wall time fires once at the transition instant; a repeated one, first pass."""
    SKIP = "skip"
    """A skipped wall time does not fire; a repeated one fires on its first pass."""
    LITERAL = "literal"
    """A skipped wall time does not fire; a repeated one fires at both instants."""


class DstAnnotation(StrEnum):
    """How DST touched one occurrence (the `dst` of an annotated occurrence, DESIGN.md §7a)."""

    SHIFTED = "shifted"
    """Stands for matching wall time(s) that did not exist (the `shift` transition instant)."""
    FIRST_PASS = "first_pass"
    """Its wall time occurs twice that day; this is the earlier instant."""
    SECOND_PASS = "second_pass"
    """Its wall time occurs twice that day; this is the later instant."""


class Action(StrEnum):
    WEBHOOK = "webhook"
    """POST the payload to the schedule's own target URL."""
    EVENT = "event"
    """Emit schedule.triggered to the schedule-events topic."""


class ScheduleState(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"
    """Can never fire again (bounds, max_runs or a one-shot's run_at passed; DESIGN.md §7a)."""


# Retry bounds: enough for a day-long outage, small enough that one run cannot live for weeks.
MAX_ATTEMPTS_RANGE = (1, 50)
MIN_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_CEILING_SECONDS = 86_400.0  # one day between two attempts at most
MULTIPLIER_RANGE = (1.0, 10.0)
MAX_RETRY_DURATION_CEILING_SECONDS = 7 * 86_400  # a week: beyond it a run's evidence goes stale
BREAKER_THRESHOLD_RANGE = (1, 1000)


@dataclass(frozen=True)
class RetryPolicy:
    """Part of a schedule's definition (domain/definition.py): no defaults, the API has them."""

    max_attempts: int
    initial_backoff_seconds: float
    max_backoff_seconds: float
    multiplier: float
    max_retry_duration_seconds: float

    def problems(self) -> list[tuple[str, str]]:
        """(field, reason) for every bound this policy breaks; empty when valid."""
        out: list[tuple[str, str]] = []
        lo, hi = MAX_ATTEMPTS_RANGE
        if not lo <= self.max_attempts <= hi:
            out.append(("max_attempts", f"must be between {lo} and {hi}"))
        if self.initial_backoff_seconds < MIN_BACKOFF_SECONDS:
            out.append(("initial_backoff_seconds", f"must be at least {MIN_BACKOFF_SECONDS:g}"))
        if not self.initial_backoff_seconds <= self.max_backoff_seconds:
            out.append(("max_backoff_seconds", "must be at least initial_backoff_seconds"))
        if self.max_backoff_seconds > MAX_BACKOFF_CEILING_SECONDS:
            out.append(("max_backoff_seconds", f"must be at most {MAX_BACKOFF_CEILING_SECONDS:g}"))
        m_lo, m_hi = MULTIPLIER_RANGE
        if not m_lo <= self.multiplier <= m_hi:
            out.append(("multiplier", f"must be between {m_lo:g} and {m_hi:g}"))
        if not 0 < self.max_retry_duration_seconds <= MAX_RETRY_DURATION_CEILING_SECONDS:
            out.append(
                (
                    "max_retry_duration_seconds",
                    f"must be between 1 and {MAX_RETRY_DURATION_CEILING_SECONDS}",
                )
            )
        return out


@dataclass(frozen=True)
class BreakerPolicy:
    failure_threshold: int

    def problems(self) -> list[tuple[str, str]]:
        lo, hi = BREAKER_THRESHOLD_RANGE
        if not lo <= self.failure_threshold <= hi:
            return [("failure_threshold", f"must be between {lo} and {hi}")]
        return []


class CompletionMode(StrEnum):
    """What ends a webhook run (DESIGN.md §7b "Completion")."""

    RESPONSE = "response"
    """A 2xx answer ends the run (the default)."""
    CALLBACK = "callback"
    """A 2xx means accepted: the run awaits `POST /v1/runs/{id}/complete` until a deadline."""


# How long a receiver may work after accepting: a minute (shorter is what `response` is for) to
# a day (a run's evidence must not wait for weeks; retries add their own time on top).
COMPLETION_TIMEOUT_RANGE = (60, 86_400)


@dataclass(frozen=True)
class CompletionPolicy:
    """Part of a schedule's run policies. `timeout_seconds` is set exactly in callback mode;
    `min_duration_seconds` (callback mode only) flags a completion sooner than it `too_fast`."""

    mode: CompletionMode
    timeout_seconds: int | None = None
    min_duration_seconds: int | None = None

    @property
    def is_callback(self) -> bool:
        return self.mode is CompletionMode.CALLBACK

    def problems(self) -> list[tuple[str, str]]:
        """(field, reason) for every rule this policy breaks; empty when valid."""
        lo, hi = COMPLETION_TIMEOUT_RANGE
        if not self.is_callback:
            return [
                (name, "is only allowed with mode 'callback'")
                for name in ("timeout_seconds", "min_duration_seconds")
                if getattr(self, name) is not None
            ]
        if self.timeout_seconds is None or not lo <= self.timeout_seconds <= hi:
            return [("timeout_seconds", f"must be between {lo} and {hi} with mode 'callback'")]
        least = self.min_duration_seconds
        if least is not None and not 0 <= least < self.timeout_seconds:
            return [("min_duration_seconds", "must be at least 0 and below timeout_seconds")]
        return []


RESPONSE_COMPLETION = CompletionPolicy(CompletionMode.RESPONSE)
"""The default: a 2xx ends the run."""


def completion_json(c: CompletionPolicy) -> dict[str, Any]:
    """The completion policy as the API shows it and the table stores it: `{"mode"}` plus the
    numbers it sets."""
    out: dict[str, Any] = {"mode": c.mode.value}
    if c.timeout_seconds is not None:
        out["timeout_seconds"] = c.timeout_seconds
    if c.min_duration_seconds is not None:
        out["min_duration_seconds"] = c.min_duration_seconds
    return out
