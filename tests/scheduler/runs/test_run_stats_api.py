"""`GET /v1/schedules/{id}/runs/stats`: runs per status per bucket over a window, every bucket
present, the newest run, tenant isolation, window validation, and buckets cut in a zone (`tz`:
DST days of 23 and 25 hours, a half-hour zone's hours)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx

import webhookdeliver as wd
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.service_layer.run_stats import window_bounds
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import make_dispatcher, step
from tests.scheduler.runs.receiver import Receiver


async def test_counts_per_status_per_bucket_and_last_run(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    failing = await add_schedule(container, receiver.url("/fail"), max_attempts=1, threshold=100)
    ok = await add_schedule(container, receiver.url("/ok"), name="ok")
    dispatcher = make_dispatcher(container, uows, deliverer)
    # T0 is 09:00:30Z: one failed run in the 09 bucket, two failed and one succeeded at 11.
    await client.post(f"/v1/schedules/{failing.id}/trigger", headers=auth())
    await step(dispatcher)
    mclock.advance(hours=2)
    for _ in range(2):
        mclock.advance(seconds=10)
        await client.post(f"/v1/schedules/{failing.id}/trigger", headers=auth())
    mclock.advance(seconds=10)
    last = (await client.post(f"/v1/schedules/{failing.id}/trigger", headers=auth())).json()
    await client.post(f"/v1/schedules/{ok.id}/trigger", headers=auth())  # another schedule's
    await step(dispatcher)

    r = await client.get(f"/v1/schedules/{failing.id}/runs/stats?window=day", headers=auth())
    assert r.status_code == 200, r.text
    day = r.json()
    assert (day["window"], day["bucket"]) == ("day", "hour")
    assert len(day["buckets"]) == 24
    assert day["buckets"][-1] == {"start": "2026-03-02T11:00:00Z", "counts": {"failed": 3}}
    assert day["buckets"][-3] == {"start": "2026-03-02T09:00:00Z", "counts": {"failed": 1}}
    assert all(b["counts"] == {} for b in day["buckets"][:-3])
    assert day["totals"] == {"failed": 4}
    assert (day["from"], day["to"]) == ("2026-03-01T12:00:00Z", "2026-03-02T12:00:00Z")
    assert day["last_run"]["id"] == last["id"]
    assert day["last_run"]["status"] == "failed"

    week = (
        await client.get(f"/v1/schedules/{ok.id}/runs/stats?window=week", headers=auth())
    ).json()
    assert [b["start"] for b in week["buckets"]][-2:] == [
        "2026-03-01T00:00:00Z",
        "2026-03-02T00:00:00Z",
    ]
    assert week["buckets"][-1]["counts"] == {"succeeded": 1}
    month = await client.get(f"/v1/schedules/{ok.id}/runs/stats?window=month", headers=auth())
    assert len(month.json()["buckets"]) == 30

    # Another tenant's schedule is a 404 like a missing one; an unknown window is a 422.
    theirs = await client.get(f"/v1/schedules/{failing.id}/runs/stats", headers=auth("tenant-b"))
    assert theirs.status_code == 404
    bad = await client.get(f"/v1/schedules/{failing.id}/runs/stats?window=year", headers=auth())
    assert bad.status_code == 422
    assert bad.json()["field"] == "window"


async def test_a_schedule_without_runs_has_empty_buckets(
    client: httpx.AsyncClient, container: Container, receiver: Receiver
) -> None:
    s = await add_schedule(container, receiver.url("/ok"))
    body = (await client.get(f"/v1/schedules/{s.id}/runs/stats", headers=auth())).json()
    assert body["window"] == "day"
    assert body["last_run"] is None
    assert body["totals"] == {}
    assert all(b["counts"] == {} for b in body["buckets"])


async def test_buckets_are_cut_in_the_zone_asked_dst_days_included(
    client: httpx.AsyncClient, container: Container, mclock: ManualClock, receiver: Receiver
) -> None:
    s = await add_schedule(container, receiver.url("/ok"))
    url = f"/v1/schedules/{s.id}/runs/stats"
    # 2026-03-09T03:30:30Z is Mar 8 23:30 EDT (the 23-hour day New York springs forward);
    # 04:10:30Z is Mar 9 00:10 EDT. In UTC both are Mar 9.
    mclock.advance(days=6, hours=18, minutes=30)
    await client.post(f"/v1/schedules/{s.id}/trigger", headers=auth())
    mclock.advance(minutes=40)
    await client.post(f"/v1/schedules/{s.id}/trigger", headers=auth())

    def total(b: dict[str, Any]) -> int:
        return sum(b["counts"].values())

    week = (await client.get(f"{url}?window=week&tz=America/New_York", headers=auth())).json()
    assert week["timezone"] == "America/New_York"
    starts = [b["start"] for b in week["buckets"]]
    assert starts[-3:] == ["2026-03-07T05:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"]
    assert (week["from"], week["to"]) == ("2026-03-03T05:00:00Z", "2026-03-10T04:00:00Z")
    assert [total(b) for b in week["buckets"]][-2:] == [1, 1]
    utc = (await client.get(f"{url}?window=week", headers=auth())).json()
    assert utc["timezone"] == "UTC"
    assert [total(b) for b in utc["buckets"]][-2:] == [0, 2]

    # Kolkata is UTC+05:30: its hours start at :30 UTC; both runs are in 09:00-10:00 IST.
    day = (await client.get(f"{url}?window=day&tz=Asia/Kolkata", headers=auth())).json()
    assert day["buckets"][-1]["start"] == "2026-03-09T03:30:00Z"
    assert total(day["buckets"][-1]) == 2
    assert sum(total(b) for b in day["buckets"]) == 2

    bad = await client.get(f"{url}?tz=Mars/Olympus", headers=auth())
    assert bad.status_code == 422, bad.text
    assert bad.json()["field"] == "tz"


def test_a_fall_back_day_is_25_hours_long() -> None:
    _, starts, end = window_bounds(
        "week", datetime(2026, 11, 2, 12, tzinfo=UTC), ZoneInfo("America/New_York")
    )
    lengths = [(b - a) / timedelta(hours=1) for a, b in zip(starts, [*starts[1:], end])]
    assert lengths == [24, 24, 24, 24, 24, 25, 24]
