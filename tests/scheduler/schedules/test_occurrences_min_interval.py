"""min_interval_seconds(): the smallest gap between consecutive occurrences, for the tenant quota.
It must never over-estimate (a schedule would slip under the quota) and should be exact for
everyday schedules (or tenants are refused for nothing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain.occurrences import Recurrence
from tests.scheduler.schedules.test_occurrences_reference import ZONES, expressions, transitions


@pytest.mark.parametrize(
    ("expression", "zone", "seconds"),
    [
        ("* * * * *", "America/New_York", 60),
        ("*/5 * * * *", "UTC", 300),
        ("0 * * * *", "America/New_York", 3600),  # the repeated hour keeps hourly gaps
        ("30 * * * *", "Australia/Lord_Howe", 1800),  # 01:30 twice, 30 minutes apart
        ("59 1,3 * * *", "America/New_York", 3600),  # 01:59 -> 03:59 across the skipped hour
        ("0 3 * * 1-5", "Africa/Addis_Ababa", 86400),
        ("0 0 * * 1", "Europe/London", 7 * 86400 - 3600),  # the week with the spring change
        ("0 0 29 2 1", "UTC", 86400),  # Monday 28th then Tuesday 29th
        ("0 0 29 2 *", "UTC", 1461 * 86400),
        # 1986-01-01 00:00 was skipped (+05:30 -> +05:45): it fired at 00:15, then 1987-01-01
        # 00:00 came a year less 15 minutes later.
        ("0 0 1 1 *", "Asia/Kathmandu", 365 * 86400 - 900),
    ],
)
def test_known_minimums(expression: str, zone: str, seconds: int) -> None:
    assert Recurrence.parse(expression, zone).min_interval_seconds() == seconds


def test_a_recent_horizon_ignores_old_irregularities() -> None:
    # Samoa skipped 2011-12-30 entirely, so a daily 03:00 once fired 3 hours after the transition
    # firing; until 2021 its DST start (03:00 -> 04:00) made one 23-hour gap a year; since then
    # the gap is always a day.
    recurrence = Recurrence.parse("0 3 * * *", "Pacific/Apia")
    assert recurrence.min_interval_seconds() == 3 * 3600
    assert recurrence.min_interval_seconds(since=datetime(2012, 1, 1, tzinfo=UTC)) == 23 * 3600
    assert recurrence.min_interval_seconds(since=datetime(2022, 1, 1, tzinfo=UTC)) == 86400


@settings(max_examples=25, deadline=None)
@given(
    expression=expressions,
    zone=st.sampled_from(ZONES),
    year=st.integers(2000, 2040),
)
def test_never_over_estimates(expression: str, zone: str, year: int) -> None:
    try:
        recurrence = Recurrence.parse(expression, zone)
    except ValueError:
        return
    since = datetime(year, 1, 1, tzinfo=UTC)
    claimed = recurrence.min_interval_seconds(since=since)
    assert claimed >= 60
    # Measure real gaps: the first stretch of the year, and around each transition of the year.
    starts = [since] + [t - timedelta(days=2) for t in transitions(zone) if t.year == year]
    for start in starts:
        stamps = [dt.timestamp() for dt in islice(recurrence.iter_after(start), 3000)]
        gaps = [b - a for a, b in pairwise(stamps)]
        assert all(gap >= claimed for gap in gaps), (min(gaps), claimed)
