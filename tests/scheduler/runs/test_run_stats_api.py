"""`GET /v1/schedules/{id}/runs/stats`: runs per status per UTC bucket over a window, every
bucket present, the newest run, tenant isolation and window validation."""

from __future__ import annotations

import httpx

import webhookdeliver as wd
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
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
