"""The occurrence engine: when a schedule fires, as real instants (DESIGN.md §7).

Matching is done on the zone's local wall time; each matching wall time is then mapped to real
instants with PEP 495 `fold` (fold=0 is the earlier reading of a repeated wall time; in a skipped
interval fold=0 uses the offset from before the transition, so its instant lands *after* the
fold=1 one - that inversion is how a skipped wall time is recognised). The rules are cronie's:

- Day rule (cronie `entry.c`, DOM_STAR/DOW_STAR): when the day-of-month or day-of-week field
  begins with `*` both must match, otherwise either may (the Vixie OR rule).
- *Wildcard* schedules (minute or hour field begins with `*`) fire at every instant whose wall
  time matches: twice in a repeated (fall-back) interval, never in a skipped one. This is cronie's
  "wildcard jobs run on every virtual minute" treatment of clock changes (`cron.c`, find_jobs with
  doWild).
- *Fixed* schedules fire at the first instant of each matching wall time (a repeated wall time
  fires once, on its first pass: cronie's "fixed-time jobs that have run already are not run
  again"), and, for each forward transition that skipped at least one matching wall time, once at
  the transition instant itself (cronie runs skipped fixed-time jobs "once, at the new time").
- Occurrences are strictly after `after`, increasing, at most one per instant.

Speed: the expression is parsed once. Candidate days are found month by month (a per-month list of
matching days), candidate minutes come from one sorted per-day list, so a sparse schedule such as
`0 0 29 2 1` costs a few month look-ups, never a minute-by-minute scan. A day whose wall midnight
and next wall midnight have the same, unambiguous offset maps all its minutes with one
subtraction; only days that contain a transition use the per-minute fold logic. This relies on
no zone changing its offset and back within one day, which holds for all of tzdata since 1900
(the closest pair of reversing transitions is four days apart: Africa/Freetown, 1939).

Historical local mean time offsets with seconds (before ~1970 in most zones) are handled, but
their occurrences are at whole *local* minutes, so the instants are not whole UTC minutes.
"""

from __future__ import annotations

import calendar
import heapq
from bisect import bisect_left
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from scheduler.domain.expression import ParsedExpression, load_zone, parse_expression

_ONE_SECOND = timedelta(seconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_LAST_ORDINAL = date.max.toordinal()
_DAY = 86_400
# The wall time where a search starts is taken with the smaller of the offsets now and two days
# later, so a repeated interval just ahead is searched from its start (reversals are >= 4 days
# apart, see the module docstring).
_LOOKAHEAD_SECONDS = 2 * _DAY
# Per-recurrence cache of matching days per (year, month); bounded, cleared when full.
_MONTH_CACHE_SIZE = 512
# min_interval_seconds(): transitions are probed every 3 days (reversals are >= 4 days apart) over
# this many years from `since`; offsets lasting under 3 days would need a finer probe.
_TRANSITION_PROBE_SECONDS = 3 * _DAY
MIN_INTERVAL_HORIZON_YEARS = 130
_DEFAULT_SINCE = datetime(1970, 1, 1, tzinfo=UTC)
# Bounds the occurrences examined around one transition in min_interval_seconds().
_MAX_OCCURRENCES_PER_TRANSITION = 20_000


def _seconds(offset: timedelta | None) -> int:
    assert offset is not None  # a ZoneInfo always answers utcoffset() for an aware datetime
    return offset // _ONE_SECOND


def _instant(after: datetime) -> int:
    """Whole seconds since the epoch, floored: an occurrence (whole seconds) is strictly after
    `after` exactly when it is strictly after this."""
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError("`after` must be an aware datetime (naive datetimes are ambiguous)")
    return (after - _EPOCH) // _ONE_SECOND


def format_occurrence(dt: datetime) -> str:
    """`2026-03-08T03:00:00-04:00`: local wall time with the offset at that instant (UTC as
    `+00:00`)."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("an occurrence is an aware datetime")
    return dt.isoformat(timespec="seconds")


class Recurrence:
    """A parsed expression in a zone. Immutable apart from internal caches; safe to share.

    Returned datetimes carry `tzinfo=ZoneInfo(timezone)` and the right `fold`. Python compares
    two datetimes with the *same* tzinfo by wall time, ignoring fold, so compare occurrences by
    `.timestamp()` or after `.astimezone(UTC)` when a repeated interval may be involved.
    """

    __slots__ = (
        "_days_cache",
        "_months",
        "_parsed",
        "_start_minutes",
        "_times",
        "_zone",
        "expression",
        "is_wildcard",
        "timezone",
    )

    def __init__(self, parsed: ParsedExpression, timezone: str, zone: ZoneInfo) -> None:
        self.expression = parsed.expression
        self.timezone = timezone
        self.is_wildcard = parsed.is_wildcard
        self._parsed = parsed
        self._zone = zone
        self._times = tuple(
            sorted((h * 60 + m, h, m) for h in parsed.hours for m in parsed.minutes)
        )
        self._start_minutes = [t[0] for t in self._times]
        self._months = tuple(sorted(parsed.months))
        self._days_cache: dict[tuple[int, int], tuple[int, ...]] = {}

    @classmethod
    def parse(cls, expression: str, timezone: str) -> Recurrence:
        """Validate both; raises InvalidScheduleExpression naming the field and the token."""
        parsed = parse_expression(expression)
        zone = load_zone(timezone)
        return cls(parsed, timezone, zone)

    def __repr__(self) -> str:
        return f"Recurrence({self.expression!r}, {self.timezone!r})"

    def next_after(self, after: datetime) -> datetime | None:
        """The first occurrence strictly after `after`; None only past the year 9999."""
        return next(self.iter_after(after), None)

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Occurrences strictly after `after`, increasing, until the year 9999 ends."""
        return self._iterate(_instant(after))

    # -- the engine ------------------------------------------------------------------------

    def _iterate(self, after_ts: int) -> Iterator[datetime]:
        start = self._start_wall(after_ts)
        if start is None:
            return
        start_ordinal, start_minute = start
        zone = self._zone
        times = self._times
        count = len(times)
        wildcard = self.is_wildcard
        # Second-pass instants of a repeated interval come after every first pass of it, so they
        # wait here until a later instant is about to be emitted.
        pending: list[tuple[int, datetime]] = []
        last = after_ts
        transition: tuple[int, int, int] | None = None  # (lo, hi, instant) of the last gap
        next_ordinal = -1
        next_offsets: tuple[int, int] | None = None
        for ordinal in self._matching_ordinals(start_ordinal):
            first = bisect_left(self._start_minutes, start_minute) if ordinal == start_ordinal else 0
            if first >= count:
                continue
            begin = next_offsets if ordinal == next_ordinal else self._midnight_offsets(ordinal)
            end = self._midnight_offsets(ordinal + 1) if ordinal < _LAST_ORDINAL else None
            next_ordinal, next_offsets = ordinal + 1, end
            assert begin is not None
            day = date.fromordinal(ordinal)
            year, month, mday = day.year, day.month, day.day
            wall_midnight = (ordinal - _EPOCH_ORDINAL) * _DAY
            if end is not None and begin[0] == begin[1] == end[0] == end[1]:
                # No transition touches this day: one offset maps every wall minute.
                base = wall_midnight - begin[0]
                for index in range(first, count):
                    minute_of_day, hour, minute = times[index]
                    ts = base + minute_of_day * 60
                    if ts <= last:
                        continue
                    while pending and pending[0][0] < ts:
                        pending_ts, pending_dt = heapq.heappop(pending)
                        if pending_ts > last:
                            last = pending_ts
                            yield pending_dt
                    last = ts
                    yield datetime(year, month, mday, hour, minute, 0, 0, zone)
                continue
            for index in range(first, count):
                minute_of_day, hour, minute = times[index]
                wall = wall_midnight + minute_of_day * 60
                first_pass = datetime(year, month, mday, hour, minute, 0, 0, zone)
                second_pass = first_pass.replace(fold=1)
                u0 = wall - _seconds(first_pass.utcoffset())
                u1 = wall - _seconds(second_pass.utcoffset())
                if u0 > u1:
                    # A skipped wall time (fold=0 uses the pre-transition offset, landing after
                    # the gap). Wildcard: never fires. Fixed: fires once at the transition
                    # instant (cronie: skipped fixed-time jobs run once at the new time).
                    if wildcard:
                        continue
                    if transition is None or not u1 < transition[2] <= u0:
                        transition = (u1, u0, self._transition_between(u1, u0))
                    ts, dt = transition[2], datetime.fromtimestamp(transition[2], zone)
                else:
                    # Exists once (u0 == u1) or twice (u0 < u1): the first pass always fires;
                    # a wildcard schedule also fires on the second pass (cronie: every
                    # virtual minute), a fixed one does not (it has already run).
                    if wildcard and u1 > u0 and u1 > last:
                        heapq.heappush(pending, (u1, second_pass))
                    ts, dt = u0, first_pass
                if ts <= last:
                    continue
                while pending and pending[0][0] < ts:
                    pending_ts, pending_dt = heapq.heappop(pending)
                    if pending_ts > last:
                        last = pending_ts
                        yield pending_dt
                last = ts
                yield dt
        while pending:
            pending_ts, pending_dt = heapq.heappop(pending)
            if pending_ts > last:
                last = pending_ts
                yield pending_dt

    def _start_wall(self, after_ts: int) -> tuple[int, int] | None:
        """(ordinal, minute of day) of the earliest wall time that can yield an instant after
        `after_ts`, or None when that is past the year 9999."""
        offset_now = self._offset_at(after_ts)
        offset_soon = self._offset_at(after_ts + _LOOKAHEAD_SECONDS)
        offsets = [o for o in (offset_now, offset_soon) if o is not None]
        if not offsets:
            # Outside what datetime can represent: before year 1 or after year 9999.
            return (1, 0) if after_ts < 0 else None
        wall = after_ts + min(offsets)
        ordinal = wall // _DAY + _EPOCH_ORDINAL
        if ordinal > _LAST_ORDINAL:
            return None
        if ordinal < 1:
            return (1, 0)
        return ordinal, (wall % _DAY) // 60

    def _offset_at(self, ts: int) -> int | None:
        try:
            return _seconds(datetime.fromtimestamp(ts, self._zone).utcoffset())
        except (OverflowError, OSError, ValueError):
            return None

    def _midnight_offsets(self, ordinal: int) -> tuple[int, int]:
        """Offsets (seconds) of the wall midnight starting that day, at fold 0 and fold 1; they
        differ when midnight is skipped or repeated."""
        day = date.fromordinal(ordinal)
        midnight = datetime(day.year, day.month, day.day, tzinfo=self._zone)
        return _seconds(midnight.utcoffset()), _seconds(midnight.replace(fold=1).utcoffset())

    def _transition_between(self, lo: int, hi: int) -> int:
        """The first instant in (lo, hi] with the offset `hi` has (one transition lies between)."""
        target = self._offset_at(hi)
        while hi - lo > 1:
            middle = (lo + hi) // 2
            if self._offset_at(middle) == target:
                hi = middle
            else:
                lo = middle
        return hi

    def _matching_ordinals(self, start_ordinal: int) -> Iterator[int]:
        """Ordinals of the days (from `start_ordinal`) whose month and day rule match."""
        start = date.fromordinal(start_ordinal)
        for year in range(start.year, 10_000):
            for month in self._months:
                if (year, month) < (start.year, start.month):
                    continue
                first_of_month = date(year, month, 1).toordinal()
                for mday in self._matching_days(year, month):
                    ordinal = first_of_month + mday - 1
                    if ordinal >= start_ordinal:
                        yield ordinal

    def _matching_days(self, year: int, month: int) -> tuple[int, ...]:
        key = (year, month)
        days = self._days_cache.get(key)
        if days is None:
            parsed = self._parsed
            # calendar.monthrange: (weekday of the 1st with Monday = 0, number of days)
            monday_based, length = calendar.monthrange(year, month)
            selected = []
            for mday in range(1, length + 1):
                in_month = mday in parsed.days_of_month
                in_week = (monday_based + mday) % 7 in parsed.days_of_week  # 0 = Sunday
                if (in_month and in_week) if parsed.days_and else (in_month or in_week):
                    selected.append(mday)
            days = tuple(selected)
            if len(self._days_cache) >= _MONTH_CACHE_SIZE:
                self._days_cache.clear()
            self._days_cache[key] = days
        return days
