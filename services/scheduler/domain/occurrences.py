"""The occurrence engine: when a schedule fires, as real instants (DESIGN.md §7).

Matching is done on the zone's local wall time; each matching wall time is then mapped to real
instants with PEP 495 `fold` (fold=0 is the earlier reading of a repeated wall time; in a skipped
interval fold=0 uses the offset from before the transition, so its instant lands *after* the
fold=1 one - that inversion is how a skipped wall time is recognised). The rules are cronie's:

- Day rule (cronie `entry.c`, DOM_STAR/DOW_STAR): when the day-of-month or day-of-week field
  begins with `*` both must match, otherwise either may (the Vixie OR rule).
- *Wildcard* schedules (minute or hour field begins with `*`) fire at every instant whose wall
  time matches: twice in a repeated (fall-back) interval, never in a skipped one (DESIGN.md; the
  wall clock simply never shows those minutes).
- *Fixed* schedules fire at the first instant of each matching wall time (a repeated wall time
  fires once, on its first pass: cronie `cron.c`, clock jumped backward, "fixed-time jobs that
  have run already are not run again"), and, for each forward transition that skipped at least
  one matching wall time, once at the transition instant itself (cronie, clock jumped forward:
  "run any fixed-time jobs that would otherwise be skipped"), however many it skipped.
- `dst_policy` (DESIGN.md §7a) changes only what a fixed schedule does: `shift` is the rule
  above; `skip` drops skipped wall times; `literal` drops them and fires a repeated wall time on
  both passes (what a wildcard schedule does). The policies differ only on days near an offset
  transition, so the fast path below is the same for all three.
- Occurrences are strictly after `after`, increasing, at most one per instant. Returned
  datetimes carry `tzinfo=ZoneInfo(zone)` and `fold=1` on a second pass.

Speed: the expression is parsed once. Candidate days are found month by month (a cached
per-month tuple of matching days), candidate minutes come from one sorted per-day list, so a
sparse schedule such as `0 0 29 2 1` costs a few month look-ups, never a minute-by-minute scan.
A day far (> _SPAN_MARGIN) from any offset transition maps all its minutes with one subtraction;
only days near a transition use the per-minute fold logic above. Transitions come from a cached
per-zone, per-decade table built by probing the offset once a day (zoneinfo exposes no
transition list); see the constants below for what that relies on, and
tests/scheduler/schedules/test_occurrences_tzdata.py for the check against tzdata itself.

Bounds: a walk gives up after MAX_GAP_YEARS without an occurrence (see the constant: only a DST
policy can starve a valid expression for good, and without the bound that walk would build every
decade's table up to the year 9999), and with `until` it stops there, so `end_at` bounds it too.

Historical local mean time offsets with seconds (before ~1970 in most zones) are handled, but
their occurrences are at whole *local* minutes, so the instants are not whole UTC minutes.
"""

from __future__ import annotations

import calendar
import functools
import heapq
import itertools
from bisect import bisect_left
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from scheduler.domain.expression import ParsedExpression, load_zone, parse_expression
from scheduler.domain.policies import DstAnnotation, DstPolicy

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
# Offset transitions of a zone are found by probing its offset once a day and bisecting, one
# cached decade at a time (`_ZoneDecade`). A day is mapped with one offset only when no transition
# lies within _SPAN_MARGIN of it (more than any offset change, 26 h, and than the probe step), so
# two transitions inside one probe step still send the day down the exact per-minute path. Only an
# offset change *and its reversal* within one day would go unseen: tzdata has none since 1900.
_TRANSITION_PROBE_SECONDS = _DAY
_SPAN_MARGIN = 2 * _DAY
_DECADE_SECONDS = 3_652 * _DAY  # ~ten years; buckets need not be calendar decades
_DECADE_CACHE_SIZE = 1024  # zones x decades; each entry is a few transitions
MIN_INTERVAL_HORIZON_YEARS = 100
_DEFAULT_SINCE = datetime(1970, 1, 1, tzinfo=UTC)
# The calendar pattern repeats every 28 years between century years; scanning 2001-2028 finds the
# smallest gap between matching days unless matches are rarer than that (then 400 years).
_DAY_GAP_SCAN = (date(2001, 1, 1).toordinal(), date(2029, 1, 1).toordinal())
_DAY_GAP_SCAN_RARE = (date(2001, 1, 1).toordinal(), date(2401, 1, 1).toordinal())
# The walk gives up after MAX_GAP_YEARS of wall time without an occurrence. Any day rule that can
# match at all matches at least once every 40 years: the rarest, February 29 on one weekday
# (`0 0 29 2 */7`), recurs after 28 years, or 40 across a century year that is not a leap year
# (2072 -> 2112); 50 leaves a margin. Beyond that only the DST policy can starve an expression
# (`30 2 8-14 3 */7` with `skip` in New York: the second Sunday of March at 02:30 never exists),
# and such a walk would otherwise cost every decade up to the year 9999 (seconds of CPU). Every
# year type of the Gregorian calendar occurs within 50 years, so with a zone's rules repeating
# yearly (tzdata's rule for the far future), no occurrence in 50 years means none ever.
MAX_GAP_YEARS = 50
_MAX_GAP_DAYS = MAX_GAP_YEARS * 365 + MAX_GAP_YEARS // 4


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
        "_drops_gaps",
        "_months",
        "_parsed",
        "_second_passes",
        "_start_minutes",
        "_times",
        "_zone",
        "dst_policy",
        "expression",
        "is_wildcard",
        "timezone",
    )

    def __init__(
        self,
        parsed: ParsedExpression,
        timezone: str,
        zone: ZoneInfo,
        dst_policy: DstPolicy = DstPolicy.SHIFT,
    ) -> None:
        self.expression = parsed.expression
        self.timezone = timezone
        self.is_wildcard = parsed.is_wildcard
        self.dst_policy = DstPolicy(dst_policy)
        # What the per-minute path does near a transition: a wildcard schedule is `literal`.
        self._drops_gaps = parsed.is_wildcard or self.dst_policy is not DstPolicy.SHIFT
        self._second_passes = parsed.is_wildcard or self.dst_policy is DstPolicy.LITERAL
        self._parsed = parsed
        self._zone = zone
        self._times = tuple(
            sorted((h * 60 + m, h, m) for h in parsed.hours for m in parsed.minutes)
        )
        self._start_minutes = [t[0] for t in self._times]
        self._months = tuple(sorted(parsed.months))
        self._days_cache: dict[tuple[int, int], tuple[int, ...]] = {}

    @classmethod
    def parse(
        cls, expression: str, timezone: str, dst_policy: DstPolicy = DstPolicy.SHIFT
    ) -> Recurrence:
        """Validate both; raises InvalidScheduleExpression naming the field and the token."""
        parsed = parse_expression(expression)
        zone = load_zone(timezone)
        return cls(parsed, timezone, zone, dst_policy)

    def __repr__(self) -> str:
        return f"Recurrence({self.expression!r}, {self.timezone!r}, {self.dst_policy.value!r})"

    def annotate(self, occurrence: datetime) -> DstAnnotation | None:
        """How DST touched `occurrence` (one this recurrence produced): `shifted` for a `shift`
        transition instant that stands for skipped matching wall times, `first_pass` /
        `second_pass` when its wall time occurs twice, None otherwise (DESIGN.md §7a).

        Costs one span look-up away from transitions, a few offset probes near one."""
        ts = _instant(occurrence)
        span_start, span_end, _ = _span(self._zone, ts)
        if span_start + _SPAN_MARGIN <= ts < span_end - _SPAN_MARGIN:
            return None
        local = datetime.fromtimestamp(ts, self._zone)
        earlier = _seconds(local.replace(fold=0).utcoffset())
        later = _seconds(local.replace(fold=1).utcoffset())
        if earlier > later:  # the wall time is repeated: fold tells the pass
            return DstAnnotation.SECOND_PASS if local.fold else DstAnnotation.FIRST_PASS
        if self._drops_gaps:
            return None
        before = self._offset_at(ts - 1)
        if before is None or before >= earlier:
            return None  # not the end of a forward gap
        # The gap is the wall interval [ts + before, ts + offset); does a matching minute lie in it?
        gap_start, gap_end = ts + before, ts + earlier
        wall = -(-gap_start // 60) * 60
        while wall < gap_end:
            if self._wall_matches(wall):
                return DstAnnotation.SHIFTED
            wall += 60
        return None

    def iter_annotated(self, after: datetime) -> Iterator[tuple[datetime, DstAnnotation | None]]:
        """`iter_after` with each occurrence's annotation."""
        for occurrence in self._iterate(_instant(after)):
            yield occurrence, self.annotate(occurrence)

    def _wall_matches(self, wall: int) -> bool:
        """Whether the wall time `wall` (seconds since the wall-clock epoch) matches."""
        day, second = divmod(wall, _DAY)
        minute_of_day = second // 60
        index = bisect_left(self._start_minutes, minute_of_day)
        if index >= len(self._start_minutes) or self._start_minutes[index] != minute_of_day:
            return False
        on = date.fromordinal(day + _EPOCH_ORDINAL)
        if on.month not in self._parsed.months:
            return False
        return on.day in self._matching_days(on.year, on.month)

    def min_interval_seconds(self, since: datetime | None = None) -> int:
        """The smallest gap, in seconds, between consecutive occurrences from `since` (default
        1970-01-01) over MIN_INTERVAL_HORIZON_YEARS, for the `min_interval_seconds` quota.

        Never over-estimates within the horizon: the structural minimum (wall-clock gaps between
        matching minutes and matching days) is lowered by what the engine actually produces
        around every offset transition of the zone in the horizon (a skipped hour shortens a gap;
        a repeated hour fires a wildcard schedule twice). Bounded cost: a few thousand offset
        probes per zone and decade (cached), then a short engine run per transition.
        """
        start = _instant(since if since is not None else _DEFAULT_SINCE)
        best = self._structural_min_seconds()
        if best <= 60:
            return best  # occurrences are whole distinct minutes: nothing can be smaller
        horizon = MIN_INTERVAL_HORIZON_YEARS * 365 * _DAY
        for instant, change in _transitions(self._zone, start, start + horizon):
            # Only occurrences within `reach` of a transition can be pulled closer by it.
            reach = abs(change) + best + 120
            previous: int | None = None
            for occurrence in self._iterate(instant - reach, instant + reach + best):
                ts = (occurrence - _EPOCH) // _ONE_SECOND
                if previous is not None:
                    best = min(best, ts - previous)
                if ts > instant + reach:
                    break
                previous = ts
        return best

    def _structural_min_seconds(self) -> int:
        """The smallest wall-clock gap between matching minutes, ignoring offset changes."""
        minutes = self._start_minutes
        smallest = min((b - a for a, b in itertools.pairwise(minutes)), default=None)
        across_days = self._min_day_gap() * 1440 - minutes[-1] + minutes[0]
        return 60 * (across_days if smallest is None else min(smallest, across_days))

    def _min_day_gap(self) -> int:
        for first, last in (_DAY_GAP_SCAN, _DAY_GAP_SCAN_RARE):
            gap: int | None = None
            previous: int | None = None
            for ordinal, _, _, _ in self._matching_days_from(first):
                if ordinal >= last:
                    break
                if previous is not None:
                    gap = ordinal - previous if gap is None else min(gap, ordinal - previous)
                    if gap == 1:
                        return 1
                previous = ordinal
            if gap is not None:
                return gap
        return 1  # unreachable for a validated expression; 1 day can never over-estimate

    def next_after(self, after: datetime, until: datetime | None = None) -> datetime | None:
        """The first occurrence strictly after `after` (and at or before `until`); None when
        there is none within MAX_GAP_YEARS of `after`, or before the year 9999 ends."""
        return next(self.iter_after(after, until), None)

    def iter_after(self, after: datetime, until: datetime | None = None) -> Iterator[datetime]:
        """Occurrences strictly after `after`, increasing, until the year 9999 ends, `until`
        (inclusive) passes, or MAX_GAP_YEARS pass without one (then it stops for good: see
        MAX_GAP_YEARS). The walk itself stops at `until`, so a bound costs what it holds."""
        return self._iterate(_instant(after), None if until is None else _instant(until))

    # -- the engine ------------------------------------------------------------------------

    def _iterate(self, after_ts: int, until_ts: int | None = None) -> Iterator[datetime]:
        if until_ts is None:
            yield from self._walk(after_ts, _LAST_ORDINAL)
            return
        # A wall day past this ordinal starts more than a day after `until_ts` in any offset
        # (offsets stay within 26 h of UTC), so the walk need not look at it.
        last_ordinal = (until_ts + _SPAN_MARGIN) // _DAY + _EPOCH_ORDINAL + 1
        for occurrence in self._walk(after_ts, last_ordinal):
            if (occurrence - _EPOCH) // _ONE_SECOND > until_ts:
                return
            yield occurrence

    def _walk(self, after_ts: int, last_ordinal: int) -> Iterator[datetime]:
        start = self._start_wall(after_ts)
        if start is None:
            return
        start_ordinal, start_minute = start
        zone = self._zone
        times = self._times
        count = len(times)
        drops_gaps = self._drops_gaps
        second_passes = self._second_passes
        # Second-pass instants of a repeated interval come after every first pass of it, so they
        # wait here until a later instant is about to be emitted.
        pending: list[tuple[int, datetime]] = []
        last = after_ts
        transition: tuple[int, int, int] | None = None  # (lo, hi, instant) of the last gap
        span_start, span_end, span_offset = 0, -1, 0  # a constant-offset UTC interval
        fired = last  # `last` when `give_up` was last moved
        give_up = start_ordinal + _MAX_GAP_DAYS
        for ordinal, year, month, mday in self._matching_days_from(start_ordinal):
            if last != fired:  # an earlier day fired: the gap counts from here
                fired, give_up = last, ordinal + _MAX_GAP_DAYS
            if ordinal > give_up or ordinal > last_ordinal:
                break
            first = (
                bisect_left(self._start_minutes, start_minute) if ordinal == start_ordinal else 0
            )
            if first >= count:
                continue
            wall_midnight = (ordinal - _EPOCH_ORDINAL) * _DAY
            lo = wall_midnight - span_offset - _SPAN_MARGIN
            hi = wall_midnight + _DAY - span_offset + _SPAN_MARGIN
            if not span_start <= lo < hi <= span_end:
                span_start, span_end, span_offset = _span(zone, wall_midnight - span_offset)
                lo = wall_midnight - span_offset - _SPAN_MARGIN
                hi = wall_midnight + _DAY - span_offset + _SPAN_MARGIN
            if span_start <= lo < hi <= span_end:
                # No transition near this day: one offset maps every wall minute.
                base = wall_midnight - span_offset
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
                    # the gap). Wildcard, `skip`, `literal`: never fires. Fixed `shift`: fires
                    # once at the transition instant (cronie: skipped fixed-time jobs run once
                    # at the new time).
                    if drops_gaps:
                        continue
                    if transition is None or not u1 < transition[2] <= u0:
                        transition = (u1, u0, self._transition_between(u1, u0))
                    ts, dt = transition[2], datetime.fromtimestamp(transition[2], zone)
                else:
                    # Exists once (u0 == u1) or twice (u0 < u1): the first pass always fires;
                    # a wildcard or `literal` schedule also fires on the second pass (cronie:
                    # every virtual minute), a fixed one does not (it has already run).
                    if second_passes and u1 > u0 and u1 > last:
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
        span_start, span_end, offset_now = _span(self._zone, after_ts)
        if span_start <= after_ts < span_end:
            soon = after_ts + _LOOKAHEAD_SECONDS
            offset_soon = offset_now if soon < span_end else _span(self._zone, soon)[2]
            offsets = [offset_now, offset_soon]
        else:  # no table here (the ends of the calendar): ask the zone directly
            offsets = [
                o
                for o in (self._offset_at(after_ts), self._offset_at(after_ts + _LOOKAHEAD_SECONDS))
                if o is not None
            ]
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

    def _matching_days_from(self, start_ordinal: int) -> Iterator[tuple[int, int, int, int]]:
        """(ordinal, year, month, day) of the days from `start_ordinal` whose month and day rule
        match, found month by month."""
        start = date.fromordinal(start_ordinal)
        months = self._months
        month_index = bisect_left(months, start.month)
        from_day = (
            start.day if month_index < len(months) and months[month_index] == start.month else 1
        )
        for year in range(start.year, 10_000):
            for month in months[month_index:]:
                days = self._matching_days(year, month)
                day_index = bisect_left(days, from_day) if from_day > 1 else 0
                from_day = 1
                if day_index < len(days):
                    before_first = date(year, month, 1).toordinal() - 1
                    for mday in days[day_index:]:
                        yield before_first + mday, year, month, mday
            month_index = 0

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


def _transitions(zone: ZoneInfo, start: int, end: int) -> Iterator[tuple[int, int]]:
    """(instant, offset change in seconds) of every offset change of `zone` in [start, end)."""
    decade = start // _DECADE_SECONDS
    while decade * _DECADE_SECONDS < end:
        table = _decade_transitions(zone, decade)
        previous = table.initial_offset
        if previous is None:  # the ends of the calendar: nothing to probe
            break
        for instant, offset in table.transitions:
            if start <= instant < end:
                yield instant, offset - previous
            previous = offset
        decade += 1


def _span(zone: ZoneInfo, ts: int) -> tuple[int, int, int]:
    """(start, end, offset): an interval around `ts` over which the zone's offset is constant,
    clipped to the cached decade; (0, -1, 0) (an empty span) outside the representable years."""
    decade = ts // _DECADE_SECONDS
    table = _decade_transitions(zone, decade)
    if table.initial_offset is None:
        return 0, -1, 0
    start, end = decade * _DECADE_SECONDS, table.end
    offset = table.initial_offset
    for instant, after in table.transitions:
        if instant <= ts:
            start, offset = instant, after
        else:
            end = instant
            break
    return start, end, offset


class _ZoneDecade:
    """A zone's offset over one decade: the offset at its start and each (instant, new offset)."""

    __slots__ = ("end", "initial_offset", "transitions")

    def __init__(
        self, initial_offset: int | None, transitions: tuple[tuple[int, int], ...], end: int
    ) -> None:
        self.initial_offset = initial_offset
        self.transitions = transitions
        self.end = end  # probed up to here (exclusive); shorter than a decade at year 9999


@functools.lru_cache(maxsize=_DECADE_CACHE_SIZE)
def _decade_transitions(zone: ZoneInfo, decade: int) -> _ZoneDecade:
    first = decade * _DECADE_SECONDS
    last = first + _DECADE_SECONDS

    def offset_at(ts: int) -> int | None:
        try:
            return _seconds(datetime.fromtimestamp(ts, zone).utcoffset())
        except (OverflowError, OSError, ValueError):
            return None

    found: list[tuple[int, int]] = []
    initial = offset_at(first)
    lo, lo_offset = first, initial
    while lo < last and lo_offset is not None:
        hi = min(lo + _TRANSITION_PROBE_SECONDS, last)
        hi_offset = offset_at(hi)
        if hi_offset is None:
            last = lo
            break
        if hi_offset != lo_offset:
            left, right = lo, hi
            while right - left > 1:
                middle = (left + right) // 2
                if offset_at(middle) == hi_offset:
                    right = middle
                else:
                    left = middle
            found.append((right, hi_offset))
        lo, lo_offset = hi, hi_offset
    return _ZoneDecade(initial, tuple(found), last if initial is not None else first)
