"""A schedule's run timeline (`GET /v1/schedules/{id}/runs/stats`): runs counted per status per
bucket over a window, aggregated by the database, so a chart never needs the rows.

Windows end with the bucket holding `now`: `day` is 24 hourly buckets, `week` 7 and `month` 30
daily ones. Buckets are hours and days of a zone (`tz`, default UTC; the console passes the
schedule's): a day runs from local midnight to local midnight, so a DST day is 23 or 25 hours,
and an hour is the zone's (a half-hour zone's hours start at :30 UTC). The database counts per
UTC hour, or per UTC minute when the zone's boundaries are not on UTC hours (one key on SQLite
and PostgreSQL); the UTC keys are then summed into the zone's buckets. Every bucket of the
window is present, empty ones with no counts.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Literal

from scheduler.domain.expression import InvalidScheduleExpression, load_zone
from scheduler.domain.run import Run
from scheduler.service_layer.errors import InvalidInput, NotFound
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory

Window = Literal["day", "week", "month"]
Bucket = Literal["hour", "day"]
Granularity = Literal["hour", "day", "minute"]

# window -> (bucket, number of buckets)
WINDOWS: dict[str, tuple[Bucket, int]] = {
    "day": ("hour", 24),
    "week": ("day", 7),
    "month": ("day", 30),
}


@dataclass(frozen=True)
class StatsBucket:
    start: datetime
    counts: dict[str, int]


@dataclass(frozen=True)
class RunStats:
    window: Window
    bucket: Bucket
    start: datetime
    end: datetime
    buckets: list[StatsBucket]
    totals: dict[str, int]
    last_run: Run | None
    timezone: str = "UTC"


def window_bounds(
    window: Window, now: datetime, zone: tzinfo = UTC
) -> tuple[Bucket, list[datetime], datetime]:
    """The bucket size, every bucket's start (oldest first, UTC) and the window's exclusive end,
    cut in `zone`."""
    bucket, n = WINDOWS[window]
    if bucket == "hour":
        # An hour is 60 minutes in every zone (transitions fall on the hour), so step in UTC
        # from the start of the zone's current hour.
        local = now.astimezone(zone)
        last = (now - timedelta(minutes=local.minute, seconds=local.second)).replace(microsecond=0)
        last = last.astimezone(UTC)
        starts = [last - timedelta(hours=n - 1 - i) for i in range(n)]
        return bucket, starts, last + timedelta(hours=1)
    # Days step in wall time: midnight to midnight, 23 or 25 hours across a DST change.
    today = now.astimezone(zone).date()
    midnights = [
        datetime.combine(today - timedelta(days=n - 1 - i), datetime.min.time(), zone).astimezone(
            UTC
        )
        for i in range(n + 1)
    ]
    return bucket, midnights[:-1], midnights[-1]


def _granularity(starts: list[datetime], end: datetime, bucket: Bucket) -> Granularity:
    """The coarsest UTC key whose periods each fall inside one bucket."""
    if all(t.minute == 0 and t.second == 0 for t in [*starts, end]):
        if bucket == "day" and all(t.hour == 0 for t in [*starts, end]):
            return "day"
        return "hour"
    return "minute"


_KEY_FORMATS = {"day": "%Y-%m-%d", "hour": "%Y-%m-%dT%H", "minute": "%Y-%m-%dT%H:%M"}


async def run_stats(
    uows: UnitOfWorkFactory,
    *,
    tenant_id: str,
    schedule_id: str,
    window: Window,
    clock: Callable[[], datetime],
    timezone: str = "UTC",
) -> RunStats:
    """`timezone` is an IANA key; an unknown one is InvalidInput naming `tz`."""
    try:
        zone = load_zone(timezone)
    except InvalidScheduleExpression as exc:
        raise InvalidInput("tz", exc.reason) from exc
    bucket, starts, end = window_bounds(window, clock(), zone)
    fine = _granularity(starts, end, bucket)
    async with uows() as uow:
        if await uow.schedules.get(tenant_id, schedule_id) is None:
            raise NotFound("schedule", schedule_id)
        rows = await uow.runs.count_runs_by_bucket(
            tenant_id, schedule_id, start=starts[0], end=end, bucket=fine
        )
        last = await uow.runs.last_run(tenant_id, schedule_id)
    counts: list[dict[str, int]] = [{} for _ in starts]
    totals: dict[str, int] = {}
    for key, status, count in rows:
        at = datetime.strptime(key, _KEY_FORMATS[fine]).replace(tzinfo=UTC)
        i = bisect_right(starts, at) - 1
        if i < 0:  # not expected: the query starts at starts[0]
            continue
        counts[i][status] = counts[i].get(status, 0) + count
        totals[status] = totals.get(status, 0) + count
    buckets = [StatsBucket(s, c) for s, c in zip(starts, counts, strict=True)]
    return RunStats(window, bucket, starts[0], end, buckets, totals, last, timezone)
