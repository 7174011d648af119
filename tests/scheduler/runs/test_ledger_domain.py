"""The ledger's computation (domain/ledger.py), pure: occurrences of the versions in force, runs
deciding outcomes, the reasons of occurrences without a run, paging and the summary."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain.ledger import (
    LedgerItem,
    LedgerRun,
    Outcome,
    PlanPosition,
    VersionSpan,
    assemble_page,
    missing_between,
    occurrences,
    page_occurrences,
    summarize,
)
from scheduler.domain.policies import DstPolicy
from scheduler.domain.timing import CompiledTiming
from tests.scheduler.definitions import timing_with

MIN = timedelta(minutes=1)
T = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def compiled(cron: str = "* * * * *", **fields: object) -> CompiledTiming:
    return timing_with(cron=cron, timezone=fields.pop("timezone", "UTC"), **fields).compile()


def span(v: int, begins: datetime, ends: datetime | None, state: str = "active", **kw: object):
    return VersionSpan(v, begins, ends, state, compiled(**kw))  # type: ignore[arg-type]


def run(t: datetime, status: str = "succeeded", reason: str | None = None) -> LedgerRun:
    return LedgerRun(f"run_{int(t.timestamp())}", t, status, reason, 1)


def all_items(
    spans: list[VersionSpan],
    runs: list[LedgerRun],
    position: PlanPosition,
    start: datetime,
    end: datetime,
    limit: int,
) -> list[list[LedgerItem]]:
    """Page through the window as the service does: runs read per page range."""
    pages, after = [], None
    lo = start - timedelta(microseconds=1)
    for _ in range(10_000):
        found, bound = page_occurrences(spans, start, end, after, limit)
        low = lo if after is None else after
        page_runs = [r for r in runs if low < r.scheduled_for <= bound and r.scheduled_for < end]
        items, more = assemble_page(found, page_runs[: limit + 1], spans, position, limit)
        pages.append(items)
        if not more:
            return pages
        after = items[-1].scheduled_for
    raise AssertionError("paging did not end")


def test_versions_in_force_put_their_occurrences_and_a_change_instant_is_the_earlier() -> None:
    edit = T + 3 * MIN  # the edit at exactly 09:03: 09:03 is the old version's
    spans = [span(1, T - MIN, edit), span(2, edit, None, cron="*/5 * * * *")]
    got = [(t, s.version) for t, s in occurrences(spans, T, T + 11 * MIN)]
    assert got == [
        (T, 1),
        (T + MIN, 1),
        (T + 2 * MIN, 1),
        (T + 3 * MIN, 1),
        (T + 5 * MIN, 2),
        (T + 10 * MIN, 2),
    ]
    # The window is [from, to): 09:11 is out, 09:00 in; before the first version: nothing.
    assert [t for t, _ in occurrences(spans, T - 5 * MIN, T)] == []


def test_outcomes_runs_decide_and_reasons_explain_the_rest() -> None:
    now = T + 10 * MIN
    spans = [
        span(1, T - MIN, T + 2 * MIN),
        span(2, T + 2 * MIN, T + 4 * MIN, state="paused"),
        span(3, T + 4 * MIN, None),
    ]
    runs = [
        run(T),
        run(T + 3 * MIN, "skipped", "schedule_paused"),  # planned ahead, skipped at claim
        run(T + 5 * MIN, "failed"),
        run(T + 6 * MIN, "skipped", "misfire"),
        run(T + 11 * MIN, "pending"),
    ]
    position = PlanPosition(now, next_run_at=T + 12 * MIN)
    [items] = all_items(spans, runs, position, T, T + 14 * MIN, 100)
    got = [(i.scheduled_for - T, i.version, i.outcome.value, i.reason, i.run_id) for i in items]
    rid = {r.scheduled_for - T: r.id for r in runs}
    assert got == [
        (0 * MIN, 1, "succeeded", None, rid[0 * MIN]),
        (1 * MIN, 1, "missing", None, None),
        (2 * MIN, 1, "missing", None, None),  # the pause's own instant is the active version's
        (3 * MIN, 2, "skipped", "schedule_paused", rid[3 * MIN]),
        (4 * MIN, 2, "not_planned", "paused", None),
        (5 * MIN, 3, "failed", None, rid[5 * MIN]),
        (6 * MIN, 3, "skipped", "misfire", rid[6 * MIN]),
        (7 * MIN, 3, "missing", None, None),
        (8 * MIN, 3, "missing", None, None),
        (9 * MIN, 3, "missing", None, None),
        (10 * MIN, 3, "missing", None, None),
        (11 * MIN, 3, "pending", None, rid[11 * MIN]),
        (12 * MIN, 3, "pending", None, None),  # in the future: not planned yet
        (13 * MIN, 3, "pending", None, None),
    ]


def test_the_planner_behind_is_pending_not_missing() -> None:
    spans = [span(1, T - MIN, None)]
    position = PlanPosition(T + 10 * MIN, next_run_at=T + 4 * MIN)  # behind since 09:04
    [items] = all_items(spans, [], position, T, T + 10 * MIN, 100)
    assert [i.outcome.value for i in items] == ["missing"] * 4 + ["pending"] * 6


def test_bounds_deleted_and_max_runs_are_reasons() -> None:
    spans = [
        span(1, T - MIN, T + 5 * MIN, start_at=T + 2 * MIN, end_at=T + 3 * MIN),
        span(2, T + 5 * MIN, T + 7 * MIN, state="completed", max_runs=3),
        span(3, T + 7 * MIN, None, state="deleted"),
    ]
    runs = [run(T + 2 * MIN), run(T + 3 * MIN)]
    [items] = all_items(spans, runs, PlanPosition(T + 20 * MIN, None), T, T + 9 * MIN, 100)
    assert [(i.outcome.value, i.reason) for i in items] == [
        ("not_planned", "before_start"),
        ("not_planned", "before_start"),
        ("succeeded", None),
        ("succeeded", None),
        ("not_planned", "after_end"),
        ("not_planned", "after_end"),
        ("not_planned", "max_runs_reached"),
        ("not_planned", "max_runs_reached"),
        ("not_planned", "deleted"),
    ]


def test_a_run_no_version_in_force_produces_is_an_item_of_its_own() -> None:
    """Planned ahead under a cron that changed since: still an occurrence, listed once."""
    spans = [span(1, T - MIN, None, cron="*/5 * * * *")]
    odd = LedgerRun("run_odd", T + 2 * MIN, "skipped", "schedule_paused", 7)
    [items] = all_items(spans, [odd], PlanPosition(T + 20 * MIN, None), T, T + 6 * MIN, 100)
    assert [(i.scheduled_for - T, i.version, i.run_id) for i in items] == [
        (0 * MIN, 1, None),
        (2 * MIN, 1, "run_odd"),
        (5 * MIN, 1, None),
    ]


def test_dst_occurrences_are_the_planners() -> None:
    """A fall-back day in New York under `literal`: 01:30 fires twice (two real instants)."""
    day = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)  # 00:00 EDT
    timing = compiled("30 1 * * *", timezone="America/New_York", dst_policy=DstPolicy.LITERAL)
    spans = [VersionSpan(1, day - MIN, None, "active", timing)]
    got = [t for t, _ in occurrences(spans, day, day + timedelta(hours=4))]
    planner = list(timing.iter_after(day - MIN, until=day + timedelta(hours=4)))
    assert got == [p.astimezone(UTC) for p in planner]
    assert len(got) == 2


def test_missing_between_counts_only_missing_in_the_range() -> None:
    spans = [span(1, T - MIN, T + 5 * MIN), span(2, T + 5 * MIN, None, state="paused")]
    planned = [T, T + 2 * MIN]
    got = missing_between(spans, planned, PlanPosition(T + 9 * MIN, None), T, T + 8 * MIN)
    # (T, T+8m]: T+1m, T+3m, T+4m and T+5m (the pause's own instant) are missing.
    assert got == [T + MIN, T + 3 * MIN, T + 4 * MIN, T + 5 * MIN]


STATUSES = ["succeeded", "failed", "pending", "in_progress", "retrying", "skipped"]
STATES = ["active", "paused", "completed", "deleted"]
CRONS = ["* * * * *", "*/2 * * * *", "*/7 * * * *", "3,4 * * * *"]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple:
    cuts = sorted(draw(st.sets(st.integers(0, 120), min_size=1, max_size=5)))
    spans = []
    for i, cut in enumerate(cuts):
        ends = T + timedelta(minutes=cuts[i + 1]) if i + 1 < len(cuts) else None
        spans.append(
            VersionSpan(
                i + 1,
                T + timedelta(minutes=cut, seconds=draw(st.sampled_from([0, 30]))),
                ends,
                draw(st.sampled_from(STATES)),
                compiled(draw(st.sampled_from(CRONS))),
            )
        )
    minutes = draw(st.sets(st.integers(0, 150), max_size=60))
    runs = [
        run(T + timedelta(minutes=m), s, "misfire" if s == "skipped" else None)
        for m in sorted(minutes)
        for s in [draw(st.sampled_from(STATUSES))]
    ]
    position = PlanPosition(
        T + timedelta(minutes=draw(st.integers(0, 150))),
        draw(st.one_of(st.none(), st.integers(0, 150).map(lambda m: T + timedelta(minutes=m)))),
    )
    start = T + timedelta(minutes=draw(st.integers(0, 60)))
    end = start + timedelta(minutes=draw(st.integers(1, 90)))
    return spans, runs, position, start, end, draw(st.integers(1, 7))


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_every_occurrence_and_run_appears_once_and_the_summary_counts_the_items(
    scenario: tuple,
) -> None:
    spans, runs, position, start, end, limit = scenario
    pages = all_items(spans, runs, position, start, end, limit)
    items = [i for page in pages for i in page]
    instants = [i.scheduled_for for i in items]
    assert instants == sorted(set(instants))  # each once, in order
    assert all(len(p) <= limit for p in pages)
    expected = {t for t, _ in occurrences(spans, start, end)}
    expected |= {r.scheduled_for for r in runs if start <= r.scheduled_for < end}
    assert set(instants) == expected
    by_run = {r.scheduled_for: r.id for r in runs}
    assert all(i.run_id == by_run.get(i.scheduled_for) for i in items)
    window_runs = [r for r in runs if start <= r.scheduled_for < end]
    summary = summarize(spans, window_runs, position, start, end)
    assert summary.total == len(items)
    assert summary.outcomes == Counter(i.outcome.value for i in items)
    skipped = Counter(i.reason for i in items if i.outcome is Outcome.SKIPPED)
    not_planned = Counter(i.reason for i in items if i.outcome is Outcome.NOT_PLANNED)
    assert summary.skipped == skipped
    assert summary.not_planned == not_planned
