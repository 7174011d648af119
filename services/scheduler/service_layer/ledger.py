"""The ledger use case (DESIGN.md §7b): `GET /v1/schedules/{id}/ledger?from=&to=`, one page of the
items of [from, to) after a cursor, computed by domain/ledger.py from the versions in force and
the runs.

Cost (a 31-day window of `* * * * *` has 44,640 occurrences): a page walks at most `limit + 1`
occurrences from its cursor and reads the planned runs of its own range (one index range of
`uq_runs_planned_occurrence`, at most `limit + 1` rows). The first page (no cursor) also carries
the window's `summary` (the window's planned runs in one range read and its occurrences walked
once: the only place the whole window is touched) and `other_runs` (manual, replay and backfill
runs, at most OTHER_RUNS_LIMIT); later pages carry neither (`summary` None).

Reads in this order, so a planner pass committing meanwhile cannot make a planned occurrence
look missing: `now`, then the schedule's `next_run_at`, then the versions, then the runs (what
the planner planned before `next_run_at` was read is visible to the later run reads).

A deleted schedule's ledger stays readable while its versions are kept (retention keeps them as
long as the runs that cite them); occurrences after the deletion are not_planned `deleted`.
Another tenant's schedule, or one with no version, is NotFound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from scheduler.domain.ledger import (
    MAX_WINDOW,
    LedgerItem,
    PlanPosition,
    Summary,
    VersionSpan,
    assemble_page,
    page_occurrences,
    summarize,
)
from scheduler.domain.timing import CompiledTiming, Timing
from scheduler.service_layer.errors import InvalidInput, NotFound
from scheduler.service_layer.ledger_ports import OtherRun, StoredSpan
from scheduler.service_layer.unit_of_work import UnitOfWork
from servicekit.data.pagination import InvalidCursor, encode_cursor, parse_cursor

Clock = Callable[[], datetime]
LIMIT_MAX = 1000
LIMIT_DEFAULT = 1000
OTHER_RUNS_LIMIT = 100
MAX_SPANS = 10_000
"""Versions in force over one window; more (a schedule rewritten every few seconds for a month)
is refused: narrow the window."""
WINDOW_RUNS_LIMIT = 200_000
"""Planned runs the summary reads: occurrences are whole minutes, so a 31-day window holds at
most ~45,000; the bound only guards against the impossible."""
_CURSOR_ID = "ledger"
_JUST_BEFORE = timedelta(microseconds=1)
TIMINGS_KEPT = 4096


@lru_cache(maxsize=TIMINGS_KEPT)
def _compiled(timing: Timing) -> CompiledTiming | None:
    try:
        return timing.compile()
    except ValueError:
        return None  # a stored expression the engine now refuses: it puts no occurrence


def to_span(s: StoredSpan) -> VersionSpan:
    return VersionSpan(s.version, s.at, s.superseded_at, s.state, _compiled(s.timing))


@dataclass(frozen=True)
class LedgerPage:
    start: datetime
    end: datetime
    items: list[LedgerItem]
    next_cursor: str | None
    summary: Summary | None
    """The whole window's counts: on the first page only."""
    other_runs: list[OtherRun]
    """On the first page only."""
    other_runs_truncated: bool


def check_window(start: datetime, end: datetime, limit: int) -> None:
    for name, value in (("from", start), ("to", end)):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidInput(name, "must carry a UTC offset (RFC 3339)")
    if end <= start:
        raise InvalidInput("to", "must be after from")
    if end - start > MAX_WINDOW:
        raise InvalidInput("to", f"the window is at most {MAX_WINDOW.days} days")
    if not 1 <= limit <= LIMIT_MAX:
        raise InvalidInput("limit", f"must be between 1 and {LIMIT_MAX}")


def _cursor_instant(cursor: str, start: datetime, end: datetime) -> datetime:
    parsed = parse_cursor(cursor)
    at = parsed.created_at.astimezone(UTC)
    if parsed.id != _CURSOR_ID or not start <= at < end:
        raise InvalidCursor("not a cursor of this window")
    return at


async def read_ledger(
    uow: UnitOfWork,
    *,
    tenant_id: str,
    schedule_id: str,
    start: datetime,
    end: datetime,
    limit: int = LIMIT_DEFAULT,
    cursor: str | None = None,
    clock: Clock,
) -> LedgerPage:
    check_window(start, end, limit)
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    after = _cursor_instant(cursor, start, end) if cursor else None
    async with uow:
        now = clock()
        found = await uow.ledger.position(tenant_id, schedule_id)
        stored = await uow.ledger.spans(tenant_id, schedule_id, start, end, MAX_SPANS + 1)
        if not stored and not await uow.ledger.has_versions(tenant_id, schedule_id):
            raise NotFound("schedule", schedule_id)
        if len(stored) > MAX_SPANS:
            raise InvalidInput("to", f"more than {MAX_SPANS} versions in the window; narrow it")
        spans = [to_span(s) for s in stored]
        position = PlanPosition(now, None if found is None else found.next_run_at)
        occurrences, bound = page_occurrences(spans, start, end, after, limit)
        lo = start - _JUST_BEFORE if after is None else after
        runs = await uow.ledger.planned_runs(tenant_id, schedule_id, lo, bound, limit + 1)
        items, more = assemble_page(occurrences, runs, spans, position, limit)
        summary, others, truncated = None, [], False
        if after is None:
            window = await uow.ledger.planned_runs(
                tenant_id, schedule_id, lo, end - _JUST_BEFORE, WINDOW_RUNS_LIMIT
            )
            summary = summarize(spans, window, position, start, end)
            others = await uow.ledger.other_runs(
                tenant_id, schedule_id, start, end, OTHER_RUNS_LIMIT + 1
            )
            truncated = len(others) > OTHER_RUNS_LIMIT
            others = others[:OTHER_RUNS_LIMIT]
    next_cursor = encode_cursor(items[-1].scheduled_for, _CURSOR_ID) if more and items else None
    return LedgerPage(start, end, items, next_cursor, summary, others, truncated)


__all__ = [
    "LIMIT_DEFAULT",
    "LIMIT_MAX",
    "OTHER_RUNS_LIMIT",
    "LedgerPage",
    "check_window",
    "read_ledger",
    "to_span",
]
