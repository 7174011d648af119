"""Guards for what the engine assumes about tzdata (see the occurrences module docstring), and for
the edges of the calendar. If a tzdata update breaks an assumption, these fail loudly instead of
the engine being silently wrong."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from itertools import islice, pairwise
from zoneinfo import ZoneInfo, available_timezones

import pytest

from scheduler.domain import occurrences
from scheduler.domain.occurrences import Recurrence, format_occurrence

FROM_1900 = int(datetime(1900, 1, 1, tzinfo=UTC).timestamp())


def effective_transitions(key: str) -> list[tuple[int, timedelta, timedelta]]:
    """(instant, offset before, offset after) from the pure-Python zoneinfo's parsed TZif data
    (test-only use of a private API, as an independent source of truth)."""
    from zoneinfo import _zoneinfo  # type: ignore[attr-defined]

    zone = _zoneinfo.ZoneInfo.no_cache(key)
    offsets = [zone._tti_before.utcoff] + [tti.utcoff for tti in zone._ttinfos]
    found, previous = [], offsets[0]
    for instant, offset in zip(zone._trans_utc, offsets[1:], strict=False):
        if offset != previous:
            found.append((instant, previous, offset))
            previous = offset
    return found


def test_no_offset_changes_within_a_probe_step_since_1900() -> None:
    # The day-level fast path and the once-a-day transition probe rely on this.
    too_close = []
    for key in sorted(available_timezones()):
        changes = [c for c in effective_transitions(key) if c[0] >= FROM_1900]
        for (first, *_), (second, *_) in pairwise(changes):
            if second - first <= occurrences._SPAN_MARGIN:
                too_close.append((key, datetime.fromtimestamp(first, UTC)))
    assert too_close == []


@pytest.mark.parametrize("key", ["America/Sao_Paulo", "Asia/Tehran", "Australia/Lord_Howe"])
def test_probed_transitions_match_tzdata(key: str) -> None:
    zone = ZoneInfo(key)
    start = int(datetime(1971, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(2045, 1, 1, tzinfo=UTC).timestamp())
    probed = list(occurrences._transitions(zone, start, end))
    expected = [
        (instant, int((after - before).total_seconds()))
        for instant, before, after in effective_transitions(key)
        if start <= instant < end
    ]
    if key == "Australia/Lord_Howe":
        # The TZif data stops at 2037; later years come from its POSIX rule, which only the
        # probe sees. Compare what both know.
        cutoff = int(datetime(2037, 1, 1, tzinfo=UTC).timestamp())
        probed = [p for p in probed if p[0] < cutoff]
        expected = [e for e in expected if e[0] < cutoff]
    assert probed == expected


@pytest.mark.parametrize(
    "after",
    [
        datetime.min.replace(tzinfo=UTC),
        datetime(1, 1, 1, 12, tzinfo=timezone(timedelta(hours=-12))),
        datetime.max.replace(tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=14))),
    ],
)
@pytest.mark.parametrize("zone", ["UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago"])
def test_the_ends_of_the_calendar_do_not_crash(after: datetime, zone: str) -> None:
    recurrence = Recurrence.parse("*/30 * * * *", zone)
    found = list(islice(recurrence.iter_after(after), 3))
    stamps = [dt.timestamp() for dt in found]
    assert stamps == sorted(stamps)
    for dt in found:
        assert dt - after > timedelta(0)  # exact; local 9999 may be UTC year 10000
        assert format_occurrence(dt)[4] == "-"
    if after.year == 9999:
        assert found == [] or found[0].year == 9999
    else:
        assert len(found) == 3
