"""A schedule's run timeline (`GET /v1/schedules/{id}/runs/stats`): runs counted per status per
bucket over a window, aggregated by the database, so a chart never needs the rows.

Windows end with the bucket holding `now`: `day` is 24 hourly buckets, `week` 7 and `month` 30
daily ones. Buckets are UTC hours and UTC days on every schedule (one key on SQLite and
PostgreSQL, and a run's bucket never depends on a later change of the schedule's zone); every
bucket of the window is present, empty ones with no counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from scheduler.domain.run import Run
from scheduler.service_layer.errors import NotFound
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory

Window = Literal["day", "week", "month"]
Bucket = Literal["hour", "day"]

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


def window_bounds(window: Window, now: datetime) -> tuple[Bucket, list[datetime], datetime]:
    """The bucket size, every bucket's start (oldest first) and the window's exclusive end."""
    bucket, n = WINDOWS[window]
    now = now.astimezone(UTC)
    if bucket == "hour":
        step = timedelta(hours=1)
        last = now.replace(minute=0, second=0, microsecond=0)
    else:
        step = timedelta(days=1)
        last = now.replace(hour=0, minute=0, second=0, microsecond=0)
    starts = [last - step * (n - 1 - i) for i in range(n)]
    return bucket, starts, last + step


def _key(start: datetime, bucket: Bucket) -> str:
    return start.strftime("%Y-%m-%dT%H" if bucket == "hour" else "%Y-%m-%d")


async def run_stats(
    uows: UnitOfWorkFactory,
    *,
    tenant_id: str,
    schedule_id: str,
    window: Window,
    clock: Callable[[], datetime],
) -> RunStats:
    bucket, starts, end = window_bounds(window, clock())
    async with uows() as uow:
        if await uow.schedules.get(tenant_id, schedule_id) is None:
            raise NotFound("schedule", schedule_id)
        rows = await uow.runs.count_runs_by_bucket(
            tenant_id, schedule_id, start=starts[0], end=end, bucket=bucket
        )
        last = await uow.runs.last_run(tenant_id, schedule_id)
    by_key: dict[str, dict[str, int]] = {}
    totals: dict[str, int] = {}
    for key, status, count in rows:
        by_key.setdefault(key, {})[status] = count
        totals[status] = totals.get(status, 0) + count
    buckets = [StatsBucket(s, by_key.get(_key(s, bucket), {})) for s in starts]
    return RunStats(window, bucket, starts[0], end, buckets, totals, last)
