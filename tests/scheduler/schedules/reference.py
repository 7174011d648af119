"""A brute-force reference for the occurrence rules (DESIGN.md §7), written independently of the
engine: walk real UTC minutes one by one, read the local wall time, apply the rules literally.

- wildcard: fire at every minute whose wall time matches;
- fixed: fire when the wall time matches and has never been shown before (first pass), or when
  the clock jumped forward over a matching wall time never shown before (once, at the jump);
- fixed under `dst_policy` (DESIGN.md §7a): `shift` is the rule above, `skip` keeps only the
  first-pass rule, `literal` is the wildcard rule.

`reference_annotated` adds the annotation from the walk itself: `shifted` when the jump rule
fired, `first_pass` / `second_pass` when the same wall time is shown at two instants.

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
    parsed: ParsedExpression,
    zone: ZoneInfo,
    after: datetime,
    until: datetime,
    policy: str = "shift",
) -> list[datetime]:
    """Occurrences in (after, until], as UTC datetimes."""
    return [instant for instant, _ in reference_annotated(parsed, zone, after, until, policy)]


def _shown_twice(zone: ZoneInfo, instant: datetime) -> str | None:
    """first_pass / second_pass when the instant's wall time is also shown at another instant."""
    reach = timedelta(hours=26)
    offsets = {(instant + d).astimezone(zone).utcoffset() for d in (-reach, timedelta(0), reach)}
    if len(offsets) == 1:
        return None  # no offset change near (tzdata has no change and reversal within 26 h)
    wall = instant.astimezone(zone).replace(tzinfo=None)
    for quarters in range(1, 26 * 4 + 1):
        for sign in (-1, 1):
            other = instant + sign * timedelta(minutes=15 * quarters)
            if other.astimezone(zone).replace(tzinfo=None) == wall:
                return "second_pass" if sign < 0 else "first_pass"
    return None


def reference_annotated(
    parsed: ParsedExpression,
    zone: ZoneInfo,
    after: datetime,
    until: datetime,
    policy: str = "shift",
) -> list[tuple[datetime, str | None]]:
    """Annotated occurrences in (after, until], as (UTC datetime, annotation)."""
    after_ts = int(after.timestamp() // 1)
    until_ts = int(until.timestamp())
    t = (int((after - WARM_UP).timestamp()) // _MINUTE) * _MINUTE
    newest_wall: datetime | None = None  # the latest wall time shown so far
    previous_wall: datetime | None = None
    found: list[tuple[datetime, str | None]] = []
    while t <= until_ts:
        instant = datetime.fromtimestamp(t, UTC)
        wall = instant.astimezone(zone).replace(tzinfo=None)
        shifted = False
        if parsed.is_wildcard or policy == "literal":
            fire = wall_matches(parsed, wall)
        else:
            fire = (newest_wall is None or wall > newest_wall) and wall_matches(parsed, wall)
            if policy == "shift" and previous_wall is not None:
                # Skipped walls: strictly between the previous minute's wall and this one.
                skipped = previous_wall + timedelta(minutes=1)
                if newest_wall is not None and skipped <= newest_wall:
                    skipped = newest_wall + timedelta(minutes=1)
                while skipped < wall:
                    if wall_matches(parsed, skipped):
                        fire = shifted = True
                        break
                    skipped += timedelta(minutes=1)
        newest_wall = wall if newest_wall is None else max(newest_wall, wall)
        previous_wall = wall
        if fire and t > after_ts:
            found.append((instant, "shifted" if shifted else _shown_twice(zone, instant)))
        t += _MINUTE
    return found
