"""Hand-written cases for every occurrence rule (DESIGN.md §7), both DST directions in several
zones. Expected values are worked out from the zone's rules, not from the engine."""

from __future__ import annotations

from datetime import datetime
from itertools import islice

import pytest

from scheduler.domain.occurrences import Recurrence, format_occurrence

CASES = [
    # --- America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST
    # fixed, skipped wall time: fires once at the transition instant
    (
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T12:00:00Z",
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
    ),
    # fixed, several skipped matches: still once per gap
    (
        "0,15,30,45 2 * * *",
        "America/New_York",
        "2026-03-08T00:00:00-05:00",
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"],
    ),
    # fixed, the gap's end matches too: once
    (
        "0 2,3 * * *",
        "America/New_York",
        "2026-03-08T00:00:00-05:00",
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"],
    ),
    (
        "30 2,3 * * *",
        "America/New_York",
        "2026-03-08T00:00:00-05:00",
        ["2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"],
    ),
    # wildcard, skipped hour: never
    (
        "*/30 2 * * *",
        "America/New_York",
        "2026-03-07T12:00:00Z",
        ["2026-03-09T02:00:00-04:00", "2026-03-09T02:30:00-04:00"],
    ),
    (
        "15 * * * *",
        "America/New_York",
        "2026-03-08T01:00:00-05:00",
        ["2026-03-08T01:15:00-05:00", "2026-03-08T03:15:00-04:00"],
    ),
    # fixed, repeated wall time: once, first pass
    (
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00:00Z",
        ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
    ),
    # wildcard, repeated hour: both passes, in time order
    (
        "*/30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00:00Z",
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-02T01:00:00-05:00",
        ],
    ),
    # `after` in the second pass: a fixed schedule whose first pass fired does not fire again
    ("30 1 * * *", "America/New_York", "2026-11-01T01:10:00-05:00", ["2026-11-02T01:30:00-05:00"]),
    (
        "30 * * * *",
        "America/New_York",
        "2026-11-01T01:10:00-05:00",
        ["2026-11-01T01:30:00-05:00", "2026-11-01T02:30:00-05:00"],
    ),
    # `after` in the first pass: the second pass of an earlier wall time is still ahead
    (
        "0 * * * *",
        "America/New_York",
        "2026-11-01T01:30:00-04:00",
        ["2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"],
    ),
    # --- EST5EDT follows the same US rules
    ("30 2 * * *", "EST5EDT", "2026-03-08T00:00:00Z", ["2026-03-08T03:00:00-04:00"]),
    (
        "*/45 1 * * *",
        "EST5EDT",
        "2026-11-01T00:00:00-04:00",
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:45:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:45:00-05:00",
        ],
    ),
    # --- Europe/London: 2026-03-29 01:00 GMT -> 02:00 BST; 2026-10-25 02:00 BST -> 01:00 GMT
    (
        "30 1 * * *",
        "Europe/London",
        "2026-03-28T12:00:00Z",
        ["2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"],
    ),
    (
        "0 * * * *",
        "Europe/London",
        "2026-10-25T00:30:00+01:00",
        ["2026-10-25T01:00:00+01:00", "2026-10-25T01:00:00+00:00", "2026-10-25T02:00:00+00:00"],
    ),
    (
        "0 1 * * *",
        "Europe/London",
        "2026-10-25T00:30:00+01:00",
        ["2026-10-25T01:00:00+01:00", "2026-10-26T01:00:00+00:00"],
    ),
    # --- Australia/Lord_Howe (30-minute DST): 2026-04-05 02:00 +11 -> 01:30 +10:30;
    #     2026-10-04 02:00 +10:30 -> 02:30 +11
    (
        "*/15 * * * *",
        "Australia/Lord_Howe",
        "2026-04-05T01:00:00+11:00",
        [
            "2026-04-05T01:15:00+11:00",
            "2026-04-05T01:30:00+11:00",
            "2026-04-05T01:45:00+11:00",
            "2026-04-05T01:30:00+10:30",
            "2026-04-05T01:45:00+10:30",
            "2026-04-05T02:00:00+10:30",
        ],
    ),
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-05T00:00:00+11:00",
        ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
    ),
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-04T00:00:00+10:30",
        ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
    ),
    (
        "*/20 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-04T00:00:00+10:30",
        ["2026-10-04T02:40:00+11:00", "2026-10-05T02:00:00+11:00"],
    ),
    # --- Australia/Sydney: 2026-04-05 03:00 +11 -> 02:00 +10; 2026-10-04 02:00 +10 -> 03:00 +11
    (
        "30 2 * * *",
        "Australia/Sydney",
        "2026-04-04T12:00:00+11:00",
        ["2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"],
    ),
    (
        "30 2 * * *",
        "Australia/Sydney",
        "2026-10-03T12:00:00+10:00",
        ["2026-10-04T03:00:00+11:00", "2026-10-05T02:30:00+11:00"],
    ),
    # --- America/Sao_Paulo (transitions at midnight, historical rules):
    #     2018-11-04 00:00 -03 -> 01:00 -02; 2019-02-17 00:00 -02 -> 2019-02-16 23:00 -03
    (
        "0 0 * * *",
        "America/Sao_Paulo",
        "2018-11-03T12:00:00Z",
        ["2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00"],
    ),
    (
        "30 * * * *",
        "America/Sao_Paulo",
        "2019-02-16T22:00:00-02:00",
        [
            "2019-02-16T22:30:00-02:00",
            "2019-02-16T23:30:00-02:00",
            "2019-02-16T23:30:00-03:00",
            "2019-02-17T00:30:00-03:00",
        ],
    ),
    (
        "30 23 * * *",
        "America/Sao_Paulo",
        "2019-02-16T12:00:00-02:00",
        ["2019-02-16T23:30:00-02:00", "2019-02-17T23:30:00-03:00"],
    ),
    # --- Asia/Tehran (DST abolished in 2022): 2022-03-22 00:00 +0330 -> 01:00 +0430;
    #     2022-09-22 00:00 +0430 -> 2022-09-21 23:00 +0330
    (
        "30 0 * * *",
        "Asia/Tehran",
        "2022-03-21T12:00:00+03:30",
        ["2022-03-22T01:00:00+04:30", "2022-03-23T00:30:00+04:30"],
    ),
    (
        "15 23 * * *",
        "Asia/Tehran",
        "2022-09-21T12:00:00+04:30",
        ["2022-09-21T23:15:00+04:30", "2022-09-22T23:15:00+03:30"],
    ),
    (
        "0 0 22 3 *",
        "Asia/Tehran",
        "2023-01-01T00:00:00Z",
        ["2023-03-22T00:00:00+03:30", "2024-03-22T00:00:00+03:30"],
    ),  # no DST any more
    # --- Pacific/Chatham (+12:45/+13:45): 2026-04-05 03:45 -> 02:45; 2026-09-27 02:45 -> 03:45
    (
        "0 3 * * *",
        "Pacific/Chatham",
        "2026-04-04T12:00:00+13:45",
        ["2026-04-05T03:00:00+13:45", "2026-04-06T03:00:00+12:45"],
    ),
    (
        "0 3 * * *",
        "Pacific/Chatham",
        "2026-09-26T12:00:00+12:45",
        ["2026-09-27T03:45:00+13:45", "2026-09-28T03:00:00+13:45"],
    ),
    (
        "*/30 3 * * *",
        "Pacific/Chatham",
        "2026-04-05T02:00:00+13:45",
        [
            "2026-04-05T03:00:00+13:45",
            "2026-04-05T03:30:00+13:45",
            "2026-04-05T03:00:00+12:45",
            "2026-04-05T03:30:00+12:45",
        ],
    ),
    # --- Asia/Kathmandu: 1986-01-01 00:00 +05:30 -> 00:15 +05:45 (a 15-minute gap)
    (
        "5 0 * * *",
        "Asia/Kathmandu",
        "1985-12-31T12:00:00+05:30",
        ["1986-01-01T00:15:00+05:45", "1986-01-02T00:05:00+05:45"],
    ),
    (
        "*/5 0 * * *",
        "Asia/Kathmandu",
        "1985-12-31T23:50:00+05:30",
        ["1986-01-01T00:15:00+05:45", "1986-01-01T00:20:00+05:45"],
    ),
    # --- zones without DST
    (
        "0 3 * * 1-5",
        "Africa/Addis_Ababa",
        "2026-03-05T21:00:00Z",  # Friday 00:00 local
        ["2026-03-06T03:00:00+03:00", "2026-03-09T03:00:00+03:00"],
    ),
    (
        "*/5 * * * *",
        "UTC",
        "2026-01-01T00:00:00.5Z",
        ["2026-01-01T00:05:00+00:00", "2026-01-01T00:10:00+00:00"],
    ),
    (
        "*/5 * * * *",
        "UTC",
        "2025-12-31T23:59:59+00:00",
        ["2026-01-01T00:00:00+00:00", "2026-01-01T00:05:00+00:00"],
    ),
    # --- day rule: OR when neither day field begins with *, AND otherwise
    (
        "0 0 13 * 5",
        "UTC",
        "2026-02-01T00:00:00Z",  # Fridays and the 13th (a Friday in Feb 2026)
        ["2026-02-06T00:00:00+00:00", "2026-02-13T00:00:00+00:00", "2026-02-20T00:00:00+00:00"],
    ),
    (
        "0 0 */10 * 5",
        "UTC",
        "2026-01-01T00:00:00Z",  # AND: days 1,11,21,31 that are Fridays
        ["2026-05-01T00:00:00+00:00", "2026-07-31T00:00:00+00:00"],
    ),
    (
        "0 0 31 2 1",
        "UTC",
        "2026-01-01T00:00:00Z",  # OR rescues Feb 31: Mondays in February
        ["2026-02-02T00:00:00+00:00", "2026-02-09T00:00:00+00:00"],
    ),
    # --- sparse schedules: years apart, found by jumping, not scanning
    (
        "0 0 29 2 *",
        "UTC",
        "2026-01-01T00:00:00Z",
        ["2028-02-29T00:00:00+00:00", "2032-02-29T00:00:00+00:00"],
    ),
    (
        "0 0 29 2 */7",
        "UTC",
        "2026-01-01T00:00:00Z",  # AND: Feb 29 on a Sunday
        ["2032-02-29T00:00:00+00:00", "2060-02-29T00:00:00+00:00"],
    ),
    (
        "0 0 29 2 *",
        "UTC",
        "2096-03-01T00:00:00Z",  # 2100 is not a leap year
        ["2104-02-29T00:00:00+00:00"],
    ),
    # --- offsets: `after` may be given in any zone
    (
        "0 9 * * *",
        "Asia/Kathmandu",
        "2026-06-01T03:15:00Z",  # exactly 09:00 +05:45: excluded
        ["2026-06-02T09:00:00+05:45"],
    ),
    # --- the end of the calendar
    ("59 23 31 12 *", "UTC", "9999-12-31T00:00:00Z", ["9999-12-31T23:59:00+00:00"]),
    ("0 0 1 1 *", "UTC", "9999-06-01T00:00:00Z", []),
    (
        "*/5 * * * *",
        "Pacific/Kiritimati",
        "9999-12-31T23:00:00+14:00",
        ["9999-12-31T23:05:00+14:00", "9999-12-31T23:10:00+14:00"],
    ),
    ("0 0 * * *", "Pacific/Kiritimati", "9999-12-31T00:00:00+14:00", []),
]


@pytest.mark.parametrize(("expression", "zone", "after", "expected"), CASES)
def test_occurrences(expression: str, zone: str, after: str, expected: list[str]) -> None:
    recurrence = Recurrence.parse(expression, zone)
    start = datetime.fromisoformat(after)
    got = [format_occurrence(dt) for dt in islice(recurrence.iter_after(start), len(expected))]
    assert got == expected
    first = recurrence.next_after(start)
    assert (format_occurrence(first) if first else None) == (expected[0] if expected else None)


def test_chained_next_after_equals_iteration_across_a_repeated_hour() -> None:
    # The planner calls next_after(previous occurrence): restarting inside a repeated interval
    # must neither repeat nor lose an instant.
    recurrence = Recurrence.parse("*/20 * * * *", "America/New_York")
    start = datetime.fromisoformat("2026-11-01T00:00:00-04:00")
    iterated = list(islice(recurrence.iter_after(start), 12))
    chained, cursor = [], start
    for _ in range(12):
        nxt = recurrence.next_after(cursor)
        assert nxt is not None
        chained.append(nxt)
        cursor = nxt
    assert [d.timestamp() for d in chained] == [d.timestamp() for d in iterated]
    stamps = [d.timestamp() for d in iterated]
    assert stamps == sorted(set(stamps))
    assert len(stamps) == 12


def test_occurrences_carry_the_zone_and_fold() -> None:
    recurrence = Recurrence.parse("30 * * * *", "America/New_York")
    first, second = islice(
        recurrence.iter_after(datetime.fromisoformat("2026-11-01T01:00:00-04:00")), 2
    )
    assert first.tzinfo is second.tzinfo
    assert str(first.tzinfo) == "America/New_York"
    assert (first.fold, second.fold) == (0, 1)
    assert second.timestamp() - first.timestamp() == 3600


def test_naive_after_is_refused() -> None:
    recurrence = Recurrence.parse("* * * * *", "UTC")
    with pytest.raises(ValueError, match="aware"):
        recurrence.next_after(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        format_occurrence(datetime(2026, 1, 1))
