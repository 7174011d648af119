"""The ledger (DESIGN.md §7b): every occurrence the definitions in force put in a window, and what
became of it. Pure: the versions, the runs, the planner's position and `now` come in as arguments.

Which version is in force at an occurrence `t`: the one with `at < t <= superseded_at`
(`VersionSpan.holds`). The change's own instant belongs to the version before it, because every
write that moves the plan (create, resume, a timing change) plans strictly after its `now`
(`CompiledTiming.first_after`): an occurrence at the very instant of a resume was not the resumed
version's to plan.

Items, in `scheduled_for` order, one per instant:
- every occurrence of the version in force (`CompiledTiming.iter_unbounded`: the planner's own
  engine, DST policy included; start_at and end_at are judged here, so the ledger can say
  `before_start` / `after_end`);
- every planned run (`trigger = schedule`) in the window, also one that no version in force
  produces (planned ahead under a timing that changed since): it is an occurrence of the version
  that planned it. A run always decides the outcome: its status, `skipped` with its skip_reason.

An occurrence without a run (`judge`):
- its version is `deleted` -> not_planned `deleted`; `paused` -> not_planned `paused`;
- before the version's start_at -> `before_start`; after its end_at -> `after_end`;
- its version is `completed` and has max_runs -> `max_runs_reached`;
- later than `now`, or not yet reached by the planner (the latest version, and `t` at or after
  the schedule's `next_run_at`): `pending` without a run_id (it will be planned);
- otherwise `missing`: it should have a run and has none.
`tenant_suspended` is a not_planned reason of the contract, but the planner records a skipped run
(`skip_reason: tenant_suspended`) for every occurrence of a suspended tenant, so a ledger item
shows the run instead; an occurrence without a run while suspended is `missing`.

Paging (`page_occurrences`, `assemble_page`): a page walks at most `limit + 1` occurrences from
the cursor and reads the planned runs up to the last of them, so its cost is the page's, never the
window's; `summarize` counts the whole window once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from scheduler.domain.timing import CompiledTiming
from scheduler.domain.versions import DELETED

MAX_WINDOW = timedelta(days=31)
"""The longest window one ledger request covers (44,640 occurrences of `* * * * *`)."""
_JUST_BEFORE = timedelta(microseconds=1)
PAUSED = "paused"
COMPLETED = "completed"


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    IN_PROGRESS = "in_progress"
    """Attempted and not finished (also a callback run awaiting its completion)."""
    RETRYING = "retrying"
    PENDING = "pending"
    """A run not attempted yet, or an occurrence not planned yet (no run_id)."""
    SKIPPED = "skipped"
    """A run recorded skipped; `reason` is its skip_reason."""
    NOT_PLANNED = "not_planned"
    """No run, for a recorded reason (`NotPlanned`)."""
    MISSING = "missing"
    """No run and no recorded reason: the alarm."""


class NotPlanned(StrEnum):
    PAUSED = "paused"
    TENANT_SUSPENDED = "tenant_suspended"
    BEFORE_START = "before_start"
    AFTER_END = "after_end"
    MAX_RUNS_REACHED = "max_runs_reached"
    DELETED = "deleted"


_BY_STATUS = {o.value: o for o in Outcome}


@dataclass(frozen=True)
class VersionSpan:
    """One version while it was in force: occurrences in (begins, ends]."""

    version: int
    begins: datetime
    """The version's `at`."""
    ends: datetime | None
    """Its `superseded_at`; None: still in force."""
    state: str
    """`active`, `paused`, `completed` or `deleted`."""
    timing: CompiledTiming | None
    """None: a stored timing the engine no longer compiles (it puts no occurrence anywhere)."""

    def holds(self, t: datetime) -> bool:
        return self.begins < t and (self.ends is None or t <= self.ends)


@dataclass(frozen=True)
class LedgerRun:
    """What the ledger reads of a planned run."""

    id: str
    scheduled_for: datetime
    status: str
    skip_reason: str | None
    schedule_version: int | None


@dataclass(frozen=True)
class PlanPosition:
    """Where the schedule stands now."""

    now: datetime
    next_run_at: datetime | None
    """The first occurrence the planner has not materialised (None: it plans none)."""


@dataclass(frozen=True)
class LedgerItem:
    scheduled_for: datetime
    version: int | None
    """The version in force at scheduled_for (a run no version in force explains: the version
    that planned it; None for runs older than versions)."""
    outcome: Outcome
    run_id: str | None = None
    reason: str | None = None


def occurrences(
    spans: Sequence[VersionSpan], start: datetime, end: datetime, after: datetime | None = None
) -> Iterator[tuple[datetime, VersionSpan]]:
    """The occurrences in [start, end), strictly after `after`, increasing (UTC), each with the
    version in force. `spans` in version order (their intervals do not overlap)."""
    lo = start - _JUST_BEFORE if after is None else max(start - _JUST_BEFORE, after)
    last = end - _JUST_BEFORE  # the engine's `until` is inclusive; whole seconds only
    for span in spans:
        if span.timing is None or (span.ends is not None and span.ends <= lo):
            continue
        if span.begins >= last:
            return
        since = max(lo, span.begins)
        until = last if span.ends is None else min(span.ends, last)
        for t in span.timing.iter_unbounded(since, until):
            yield t.astimezone(UTC), span


def run_outcome(run: LedgerRun) -> tuple[Outcome, str | None]:
    """The outcome a run gives its occurrence: its status (a status this code does not know, a
    later non-terminal one, reads as in_progress), `skipped` with its skip_reason."""
    outcome = _BY_STATUS.get(run.status, Outcome.IN_PROGRESS)
    if outcome in (Outcome.NOT_PLANNED, Outcome.MISSING):
        outcome = Outcome.IN_PROGRESS
    return outcome, run.skip_reason if outcome is Outcome.SKIPPED else None


def judge(t: datetime, span: VersionSpan, position: PlanPosition) -> tuple[Outcome, str | None]:
    """The outcome of an occurrence that has no run (the rules in the module docstring)."""
    if span.state == DELETED:
        return Outcome.NOT_PLANNED, NotPlanned.DELETED.value
    if span.state == PAUSED:
        return Outcome.NOT_PLANNED, NotPlanned.PAUSED.value
    timing = span.timing.timing if span.timing is not None else None
    if timing is not None:
        if timing.start_at is not None and t < timing.start_at:
            return Outcome.NOT_PLANNED, NotPlanned.BEFORE_START.value
        if timing.end_at is not None and t > timing.end_at:
            return Outcome.NOT_PLANNED, NotPlanned.AFTER_END.value
        if span.state == COMPLETED and timing.max_runs is not None:
            return Outcome.NOT_PLANNED, NotPlanned.MAX_RUNS_REACHED.value
    if t > position.now:
        return Outcome.PENDING, None
    nxt = position.next_run_at
    if span.ends is None and nxt is not None and t >= nxt:
        return Outcome.PENDING, None  # the planner has not reached it yet
    return Outcome.MISSING, None


def span_at(spans: Sequence[VersionSpan], t: datetime) -> VersionSpan | None:
    return next((s for s in spans if s.holds(t)), None)


def page_occurrences(
    spans: Sequence[VersionSpan],
    start: datetime,
    end: datetime,
    after: datetime | None,
    limit: int,
) -> tuple[list[tuple[datetime, VersionSpan]], datetime]:
    """Up to `limit + 1` occurrences after `after`, and the instant up to which (inclusive) the
    page's planned runs must be read: the last of them when there are `limit + 1` (more may
    follow), else just before `end`."""
    found: list[tuple[datetime, VersionSpan]] = []
    for item in occurrences(spans, start, end, after):
        found.append(item)
        if len(found) > limit:
            return found, item[0]
    return found, end - _JUST_BEFORE


def assemble_page(
    found: Sequence[tuple[datetime, VersionSpan]],
    runs: Sequence[LedgerRun],
    spans: Sequence[VersionSpan],
    position: PlanPosition,
    limit: int,
) -> tuple[list[LedgerItem], bool]:
    """Merge a page's occurrences (`page_occurrences`) with the planned runs read after the
    cursor up to its bound (at most `limit + 1`, in scheduled_for order): the first `limit`
    items, and whether more follow. Whatever was cut, the first `limit + 1` merged items are
    exact: every run up to the last one read and every occurrence up to the bound are here."""
    merged = list(_merge(found, runs, spans, position))
    return merged[:limit], len(merged) > limit


def _merge(
    found: Sequence[tuple[datetime, VersionSpan]],
    runs: Sequence[LedgerRun],
    spans: Sequence[VersionSpan],
    position: PlanPosition,
) -> Iterator[LedgerItem]:
    by_instant = {r.scheduled_for.astimezone(UTC): r for r in runs}
    produced = {t for t, _ in found}
    stream: list[tuple[datetime, VersionSpan | None]] = list(found)
    stream.extend((t, None) for t in by_instant if t not in produced)
    stream.sort(key=lambda pair: pair[0])
    for t, span in stream:
        run = by_instant.get(t)
        if span is None:
            assert run is not None
            holder = span_at(spans, t)
            version = holder.version if holder is not None else run.schedule_version
            outcome, reason = run_outcome(run)
            yield LedgerItem(t, version, outcome, run.id, reason)
        elif run is not None:
            outcome, reason = run_outcome(run)
            yield LedgerItem(t, span.version, outcome, run.id, reason)
        else:
            outcome, reason = judge(t, span, position)
            yield LedgerItem(t, span.version, outcome, None, reason)


@dataclass
class Summary:
    """Counts over a whole window: items by outcome, and by reason within `skipped` and
    `not_planned`."""

    total: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    not_planned: Counter[str] = field(default_factory=Counter)

    def add(self, outcome: Outcome, reason: str | None, count: int = 1) -> None:
        self.total += count
        self.outcomes[outcome.value] += count
        if outcome is Outcome.SKIPPED:
            self.skipped[reason or "unknown"] += count
        elif outcome is Outcome.NOT_PLANNED:
            self.not_planned[reason or "unknown"] += count


def summarize(
    spans: Sequence[VersionSpan],
    runs: Iterable[LedgerRun],
    position: PlanPosition,
    start: datetime,
    end: datetime,
) -> Summary:
    """The counts of every item of [start, end): each planned run in it (`runs`) by its outcome,
    each occurrence without one by `judge`. Walks the window's occurrences once."""
    summary = Summary()
    instants: set[datetime] = set()
    for run in runs:
        instants.add(run.scheduled_for.astimezone(UTC))
        summary.add(*run_outcome(run))
    for t, span in occurrences(spans, start, end):
        if t not in instants:
            summary.add(*judge(t, span, position))
    return summary


def missing_between(
    spans: Sequence[VersionSpan],
    planned: Iterable[datetime],
    position: PlanPosition,
    after: datetime,
    until: datetime,
) -> list[datetime]:
    """The `missing` occurrences in (after, until]: what the worker's periodic check counts."""
    have = {t.astimezone(UTC) for t in planned}
    out = []
    for t, span in occurrences(spans, after + _JUST_BEFORE, until + _JUST_BEFORE):
        if t not in have and judge(t, span, position)[0] is Outcome.MISSING:
            out.append(t)
    return out


__all__ = [
    "MAX_WINDOW",
    "LedgerItem",
    "LedgerRun",
    "NotPlanned",
    "Outcome",
    "PlanPosition",
    "Summary",
    "VersionSpan",
    "assemble_page",
    "judge",
    "missing_between",
    "occurrences",
    "page_occurrences",
    "run_outcome",
    "span_at",
    "summarize",
]
