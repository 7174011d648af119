"""The engine's walk is bounded (occurrences.MAX_GAP_YEARS, and end_at): an expression the DST
policy starves for good costs a few decades of walking, not one to the year 9999. Steps are
counted (months the engine examined), never timed."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta

import pytest

from scheduler.domain.expression import load_zone, parse_expression
from scheduler.domain.occurrences import MAX_GAP_YEARS, Recurrence
from scheduler.domain.policies import DstPolicy
from scheduler.domain.timing import CompiledTiming, InvalidTiming, Timing, check_timing

# The second Sunday of March at 02:30: inside New York's spring-forward gap every year, so with
# `skip` it never fires.
STARVED = "30 2 8-14 3 */7"
NOW = datetime(2026, 5, 1, tzinfo=UTC)


class CountingRecurrence(Recurrence):
    """The real engine, counting the (year, month) look-ups its walk makes: one per month
    examined, the unit a walk's cost grows with."""

    def __init__(self, expression: str, timezone: str, policy: DstPolicy) -> None:
        super().__init__(parse_expression(expression), timezone, load_zone(timezone), policy)
        self.months_examined: list[tuple[int, int]] = []

    def _matching_days(self, year: int, month: int) -> tuple[int, ...]:
        self.months_examined.append((year, month))
        return super()._matching_days(year, month)


def timing(cron: str, **kw: object) -> Timing:
    fields: dict[str, object] = {
        "timezone": "America/New_York",
        "cron": cron,
        "run_at": None,
        "dst_policy": DstPolicy.SKIP,
        "start_at": None,
        "end_at": None,
        "max_runs": None,
        "jitter_seconds": 0,
    }
    fields.update(kw)
    return Timing(**fields)  # type: ignore[arg-type]


def test_a_starved_expression_gives_up_after_the_bound() -> None:
    r = CountingRecurrence(STARVED, "America/New_York", DstPolicy.SKIP)
    assert r.next_after(NOW) is None
    # One March per year, up to MAX_GAP_YEARS (+1 for the partial years at both ends).
    assert len(r.months_examined) <= MAX_GAP_YEARS + 2
    assert max(r.months_examined) <= (NOW.year + MAX_GAP_YEARS + 1, 12)


def test_the_same_expression_with_shift_still_fires_every_year() -> None:
    r = Recurrence.parse(STARVED, "America/New_York", DstPolicy.SHIFT)
    first = r.next_after(NOW)
    assert first is not None
    assert first.isoformat() == "2027-03-14T03:00:00-04:00"


def test_end_at_bounds_the_walk() -> None:
    r = CountingRecurrence(STARVED, "America/New_York", DstPolicy.SKIP)
    end = NOW + timedelta(days=3 * 365)
    assert list(r.iter_after(NOW, end)) == []
    assert len(r.months_examined) <= 4  # March 2027, 2028, 2029 (and one past end_at at most)
    compiled = CompiledTiming(timing(STARVED, end_at=end), r)
    r.months_examined.clear()
    assert compiled.next_after(NOW) is None
    assert len(r.months_examined) <= 4


def test_until_is_inclusive_and_bounds_what_is_yielded() -> None:
    r = Recurrence.parse("0 0 * * *", "Europe/Paris")
    until = datetime(2026, 5, 3, 22, 0, tzinfo=UTC)  # 2026-05-04T00:00+02:00
    got = [o.isoformat() for o in r.iter_after(NOW, until)]
    assert got == [
        "2026-05-02T00:00:00+02:00",
        "2026-05-03T00:00:00+02:00",
        "2026-05-04T00:00:00+02:00",
    ]
    assert list(r.iter_after(NOW, until - timedelta(seconds=1)))[-1].day == 3


def _leap_days_on(weekday: int, first: int, last: int) -> list[int]:
    return [
        y
        for y in range(first, last)
        if (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)) and date(y, 2, 29).weekday() == weekday
    ]


def test_the_rarest_day_rule_fires_across_its_40_year_gap() -> None:
    # February 29 on a Sunday (AND rule: the day-of-week field begins with `*`): 28 years
    # apart, or 40 across a century year that is not a leap year. The bound must exceed that.
    years = _leap_days_on(6, 2000, 2500)
    gaps = {b - a for a, b in itertools.pairwise(years)}
    assert max(gaps) == 40 < MAX_GAP_YEARS
    r = Recurrence.parse("0 0 29 2 */7", "America/New_York", DstPolicy.SKIP)
    got = [o.year for o in r.iter_after(datetime(2000, 1, 1, tzinfo=UTC), None)][: len(years)]
    assert got == years


def test_check_timing_refuses_a_starved_cron_naming_the_bound() -> None:
    with pytest.raises(InvalidTiming) as refused:
        check_timing(timing(STARVED), NOW)
    assert refused.value.field == "cron"
    assert f"less than once in {MAX_GAP_YEARS} years" in refused.value.reason
    assert "dst_policy skip" in refused.value.reason


def test_check_timing_blames_end_at_when_it_ends_before_the_bound() -> None:
    with pytest.raises(InvalidTiming) as refused:
        check_timing(timing(STARVED, end_at=NOW + timedelta(days=400)), NOW)
    assert refused.value.field == "end_at"
    # An end_at past the bound: the cron is what never fires.
    with pytest.raises(InvalidTiming) as refused:
        check_timing(timing(STARVED, end_at=NOW + timedelta(days=365 * 200)), NOW)
    assert refused.value.field == "cron"


def test_a_rare_but_valid_cron_passes_check_timing_just_after_an_occurrence() -> None:
    years = _leap_days_on(6, 2000, 2500)
    before_gap = next(a for a, b in itertools.pairwise(years) if b - a == 40)
    now = datetime(before_gap, 3, 1, tzinfo=UTC)
    first = check_timing(timing("0 0 29 2 */7"), now).first_after(now)
    assert first is not None
    assert first.year == before_gap + 40
