"""A brute-force reference for the occurrence rules (DESIGN.md §7), written independently of the
engine: walk real UTC minutes one by one, read the local wall time, apply the rules literally.

- wildcard: fire at every minute whose wall time matches;
- fixed: fire when the wall time matches and has never been shown before (first pass), or when
  the clock jumped forward over a matching wall time never shown before (once, at the jump).

"Shown before" needs history, so the walk starts `WARM_UP` before `after` (longer than any
backward jump in modern tzdata). Slow by design: use windows of a few days, years >= 1971.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from scheduler.domain.expression import ParsedExpression

WARM_UP = timedelta(days=2)
_MINUTE = 60


def wall_matches(parsed: ParsedExpression, wall: datetime) -> bool:
    """The matching rule on a naive wall time, including the day rule keyed on `*`."""
    if wall.minute not in parsed.minutes or wall.hour not in parsed.hours:
        return False
    if wall.month not in parsed.months:
        return False
    in_month = wall.day in parsed.days_of_month
    in_week = (wall.weekday() + 1) % 7 in parsed.days_of_week  # cron: 0 = Sunday
    return (in_month and in_week) if parsed.days_and else (in_month or in_week)


def reference_occurrences(
    parsed: ParsedExpression, zone: ZoneInfo, after: datetime, until: datetime
) -> list[datetime]:
    """Occurrences in (after, until], as UTC datetimes."""
    after_ts = int(after.timestamp() // 1)
    until_ts = int(until.timestamp())
    t = (int((after - WARM_UP).timestamp()) // _MINUTE) * _MINUTE
    newest_wall: datetime | None = None  # the latest wall time shown so far
    previous_wall: datetime | None = None
    found: list[datetime] = []
    while t <= until_ts:
        instant = datetime.fromtimestamp(t, UTC)
        wall = instant.astimezone(zone).replace(tzinfo=None)
        if parsed.is_wildcard:
            fire = wall_matches(parsed, wall)
        else:
            fire = (newest_wall is None or wall > newest_wall) and wall_matches(parsed, wall)
            if not fire and previous_wall is not None:
                # Skipped walls: strictly between the previous minute's wall and this one.
                skipped = previous_wall + timedelta(minutes=1)
                if newest_wall is not None and skipped <= newest_wall:
                    skipped = newest_wall + timedelta(minutes=1)
                while skipped < wall:
                    if wall_matches(parsed, skipped):
                        fire = True
                        break
                    skipped += timedelta(minutes=1)
        newest_wall = wall if newest_wall is None else max(newest_wall, wall)
        previous_wall = wall
        if fire and t > after_ts:
            found.append(instant)
        t += _MINUTE
    return found
