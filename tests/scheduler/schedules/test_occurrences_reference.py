"""The engine against the brute-force reference (tests/scheduler/schedules/reference.py) over random
expressions, zones and instants, with DST transition days over-sampled."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler.domain.expression import parse_expression
from scheduler.domain.occurrences import Recurrence, format_occurrence
from tests.scheduler.schedules.reference import reference_occurrences

ZONES = [
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Pacific/Chatham",
    "America/Sao_Paulo",
    "Asia/Tehran",
    "Europe/London",
    "America/New_York",
    "Australia/Sydney",
    "Africa/Addis_Ababa",
    "UTC",
    "EST5EDT",
]
WINDOW = timedelta(days=2)
FIRST = datetime(1975, 1, 1, tzinfo=UTC)
LAST = datetime(2045, 1, 1, tzinfo=UTC)


@functools.cache
def transitions(zone_name: str) -> tuple[datetime, ...]:
    """Offset changes of the zone between FIRST and LAST (found by daily probes + bisection)."""
    zone = ZoneInfo(zone_name)
    found = []
    probe = FIRST
    offset = probe.astimezone(zone).utcoffset()
    while probe < LAST:
        nxt = probe + timedelta(days=1)
        nxt_offset = nxt.astimezone(zone).utcoffset()
        if nxt_offset != offset:
            lo, hi = probe, nxt
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == nxt_offset:
                    hi = mid
                else:
                    lo = mid
            found.append(hi)
        probe, offset = nxt, nxt_offset
    return tuple(found)


def field(low: int, high: int, star_weight: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    step = st.integers(1, max(2, (high - low) // 2 + 2))
    item = st.one_of(
        value.map(str),
        st.tuples(value, value).map(lambda p: f"{min(p)}-{max(p)}"),
        st.tuples(value, value, step).map(lambda p: f"{min(p[:2])}-{max(p[:2])}/{p[2]}"),
        step.map(lambda s: f"*/{s}"),
    )
    listed = st.lists(item, min_size=1, max_size=3).map(",".join)
    return st.one_of(*([st.just("*")] * star_weight), listed)


# Dense enough that a two-day window usually holds occurrences; hours and days skew to `*`.
expressions = st.tuples(
    field(0, 59, 1), field(0, 23, 2), field(1, 31, 3), field(1, 12, 4), field(0, 7, 3)
).map(" ".join)


@st.composite
def instants(draw: st.DrawFn, zone_name: str) -> datetime:
    near = transitions(zone_name)
    if near and draw(st.integers(0, 3)) > 0:  # three in four near a transition
        base = draw(st.sampled_from(near))
        return base + timedelta(seconds=draw(st.integers(-36 * 3600, 12 * 3600)))
    seconds = draw(st.integers(0, int((LAST - FIRST).total_seconds()) - 10 * 86400))
    return FIRST + timedelta(seconds=seconds)


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime]:
    zone_name = draw(st.sampled_from(ZONES))
    expression = draw(expressions)
    return expression, zone_name, draw(instants(zone_name))


def engine_occurrences(recurrence: Recurrence, after: datetime, until: datetime) -> list[datetime]:
    found = []
    for occurrence in recurrence.iter_after(after):
        if occurrence > until:  # aware comparison across zones: by instant
            break
        found.append(occurrence)
    return found


def check(expression: str, zone_name: str, after: datetime) -> None:
    try:
        recurrence = Recurrence.parse(expression, zone_name)
    except ValueError:
        return  # impossible dates are refused; covered by the expression table
    until = after + WINDOW
    expected = reference_occurrences(
        parse_expression(expression), ZoneInfo(zone_name), after, until
    )
    got = engine_occurrences(recurrence, after, until)
    assert [dt.astimezone(UTC) for dt in got] == expected
    zone = ZoneInfo(zone_name)
    for dt in got:
        # Wall time and fold are those of the instant: formatting shows the offset in force.
        assert format_occurrence(dt) == format_occurrence(
            datetime.fromtimestamp(dt.timestamp(), zone)
        )
    # Restarting from each occurrence (what the planner does) gives the next one.
    for previous, nxt in pairwise(got):
        again = recurrence.next_after(previous)
        assert again is not None
        assert again.timestamp() == nxt.timestamp()


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(cases())
@example(("*/20 1 * * *", "America/New_York", datetime(2026, 11, 1, 4, 50, tzinfo=UTC)))
@example(("0 2,3 * * *", "America/New_York", datetime(2026, 3, 8, 1, 0, tzinfo=UTC)))
@example(("30 23 * * *", "America/Sao_Paulo", datetime(2019, 2, 16, 12, 0, tzinfo=UTC)))
@example(("0 0 * * *", "America/Sao_Paulo", datetime(2018, 11, 3, 12, 0, tzinfo=UTC)))
@example(("*/15 1-2 * * *", "Australia/Lord_Howe", datetime(2026, 4, 4, 12, 0, tzinfo=UTC)))
@example(("15 2 * * *", "Australia/Lord_Howe", datetime(2026, 10, 3, 12, 0, tzinfo=UTC)))
@example(("0 3 * * *", "Pacific/Chatham", datetime(2026, 9, 26, 12, 0, tzinfo=UTC)))
@example(("30 0 * * *", "Asia/Tehran", datetime(2022, 3, 21, 12, 0, tzinfo=UTC)))
@example(("*/5 23 * * *", "Asia/Tehran", datetime(2022, 9, 21, 12, 0, tzinfo=UTC)))
@example(("5 0 * * *", "Asia/Kathmandu", datetime(1985, 12, 31, 12, 0, tzinfo=UTC)))
@example(("0-59/7 1 * * *", "Europe/London", datetime(2026, 10, 24, 23, 0, tzinfo=UTC)))
def test_engine_matches_reference(case: tuple[str, str, datetime]) -> None:
    check(*case)


def test_windows_across_every_transition_of_a_year_agree() -> None:
    # Deterministic sweep: each 2026 transition of every zone, fixed and wildcard schedules.
    for zone_name in ZONES:
        for transition in transitions(zone_name):
            if transition.year not in (1986, 2019, 2022, 2026):
                continue
            for expression in ("*/10 * * * *", "30 0-3 * * *", "0 * * * *", "45 2 * * *"):
                check(expression, zone_name, transition - timedelta(hours=30))


def test_sequence_is_strictly_increasing_over_a_year() -> None:
    recurrence = Recurrence.parse("*/7 0-3 * * *", "Australia/Lord_Howe")
    stamps = [
        dt.timestamp()
        for dt in islice(recurrence.iter_after(datetime(2026, 1, 1, tzinfo=UTC)), 12_000)
    ]
    assert all(a < b for a, b in pairwise(stamps))
