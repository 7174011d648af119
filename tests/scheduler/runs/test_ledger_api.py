"""The ledger over HTTP (ASGI) on SQLite and PostgreSQL, with the planner driven in-process on a
manual clock: pages cover the window exactly once, the summary counts the whole window, a pause
and a deletion are reasons, manual runs are other runs, windows and cursors are checked, and
another tenant's schedule is 404."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import sqlalchemy as sa

from scheduler.adapters.db.tables import runs
from scheduler.bootstrap import Container
from scheduler.service_layer.planning_service import plan_due
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import ManualClock, add_schedule

MIN = timedelta(minutes=1)
URL = "/v1/schedules/{}/ledger"


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def ledger(
    client: httpx.AsyncClient, sid: str, start: datetime, end: datetime, **params: Any
) -> dict[str, Any]:
    r = await client.get(
        URL.format(sid), params={"from": iso(start), "to": iso(end), **params}, headers=auth()
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def all_pages(
    client: httpx.AsyncClient, sid: str, start: datetime, end: datetime, limit: int
) -> list[dict[str, Any]]:
    pages = [await ledger(client, sid, start, end, limit=limit)]
    while pages[-1]["next_cursor"] and len(pages) < 100:
        cursor = pages[-1]["next_cursor"]
        pages.append(await ledger(client, sid, start, end, limit=limit, cursor=cursor))
    return pages


async def minutes(
    container: Container, clock: ManualClock, count: int, *, paused: bool = False
) -> None:
    """Plan, move a minute on and settle what came due, `count` times: succeeded, or (`paused`)
    skipped `schedule_paused` as the dispatcher records a planned run of a paused schedule."""
    settled = (
        {"status": "skipped", "skip_reason": "schedule_paused"}
        if paused
        else {"status": "succeeded"}
    )
    for _ in range(count):
        await plan_due(container.uow_factory, now=clock())
        clock.advance(minutes=1)
        async with container.engine.begin() as conn:
            await conn.execute(
                sa.update(runs)
                .where(runs.c.status == "pending")
                .where(runs.c.scheduled_for <= clock())
                .values(finished_at=clock(), **settled)
            )


async def test_pages_cover_the_window_once_and_the_summary_counts_it(
    client: httpx.AsyncClient, container: Container, mclock: ManualClock
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")  # created 09:00:30
    await minutes(container, mclock, 4)  # 09:01 .. 09:04 succeed
    await plan_due(container.uow_factory, now=mclock())  # 09:05 planned ahead
    r = await client.post(f"/v1/schedules/{s.id}/pause", headers=auth())  # at 09:04:30
    assert r.status_code == 200, r.text
    await minutes(container, mclock, 3, paused=True)  # nothing planned while paused
    r = await client.post(f"/v1/schedules/{s.id}/resume", headers=auth())  # at 09:07:30
    assert r.status_code == 200, r.text
    await minutes(container, mclock, 3)  # 09:08 .. 09:10 succeed; now 09:10:30
    await plan_due(container.uow_factory, now=mclock())  # 09:11 planned ahead

    start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    end = start + 15 * MIN
    whole = await ledger(client, s.id, start, end)
    got = [(i["scheduled_for"][11:16], i["outcome"], i.get("reason")) for i in whole["items"]]
    assert got == [
        ("09:01", "succeeded", None),
        ("09:02", "succeeded", None),
        ("09:03", "succeeded", None),
        ("09:04", "succeeded", None),
        ("09:05", "skipped", "schedule_paused"),  # planned ahead, then the pause
        ("09:06", "not_planned", "paused"),
        ("09:07", "not_planned", "paused"),
        ("09:08", "succeeded", None),
        ("09:09", "succeeded", None),
        ("09:10", "succeeded", None),
        ("09:11", "pending", None),  # planned ahead (run_id), not due
        ("09:12", "pending", None),  # not planned yet
        ("09:13", "pending", None),
        ("09:14", "pending", None),
    ]
    assert "run_id" in whole["items"][10]
    assert "run_id" not in whole["items"][11]
    assert [i["version"] for i in whole["items"]] == [1] * 4 + [2] * 3 + [3] * 7
    assert whole["next_cursor"] is None
    summary = whole["summary"]
    assert summary["total"] == 14
    assert {k: v for k, v in summary["outcomes"].items() if v} == {
        "succeeded": 7,
        "skipped": 1,
        "not_planned": 2,
        "pending": 4,
    }
    assert summary["outcomes"]["missing"] == 0
    assert summary["reasons"] == {"skipped": {"schedule_paused": 1}, "not_planned": {"paused": 2}}

    pages = await all_pages(client, s.id, start, end, limit=3)
    assert [len(p["items"]) for p in pages] == [3, 3, 3, 3, 2]
    assert [i for p in pages for i in p["items"]] == whole["items"]
    assert pages[0]["summary"] == summary
    assert all(p["summary"] is None for p in pages[1:])


async def test_a_missing_run_row_is_missing(
    client: httpx.AsyncClient, container: Container, mclock: ManualClock
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    await minutes(container, mclock, 5)
    async with container.engine.begin() as conn:
        await conn.execute(
            sa.delete(runs).where(runs.c.scheduled_for == datetime(2026, 3, 2, 9, 3, tzinfo=UTC))
        )
    start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    body = await ledger(client, s.id, start, start + 5 * MIN)
    outcomes = {i["scheduled_for"][11:16]: i["outcome"] for i in body["items"]}
    assert outcomes == {
        "09:01": "succeeded",
        "09:02": "succeeded",
        "09:03": "missing",
        "09:04": "succeeded",
    }
    assert body["summary"]["outcomes"]["missing"] == 1


async def test_manual_runs_are_other_runs_and_deletion_is_a_reason(
    client: httpx.AsyncClient, container: Container, mclock: ManualClock
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    await minutes(container, mclock, 2)
    r = await client.post(f"/v1/schedules/{s.id}/trigger", headers=auth())
    assert r.status_code == 202, r.text
    manual = r.json()["id"]
    mclock.advance(seconds=5)
    assert (await client.delete(f"/v1/schedules/{s.id}", headers=auth())).status_code == 204
    mclock.advance(minutes=3)
    start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    body = await ledger(client, s.id, start, start + 6 * MIN)
    assert [o["id"] for o in body["other_runs"]] == [manual]
    assert body["other_runs"][0]["trigger"] == "manual"
    assert manual not in {i.get("run_id") for i in body["items"]}
    # Deleted at 09:02:35: 09:03 onwards are the deleted version's.
    got = [(i["outcome"], i.get("reason"), i["version"]) for i in body["items"]]
    assert got == [("succeeded", None, 1)] * 2 + [("not_planned", "deleted", 2)] * 3
    assert body["summary"]["reasons"]["not_planned"] == {"deleted": 3}


async def test_windows_cursors_and_tenants_are_checked(
    client: httpx.AsyncClient, container: Container
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    start = datetime(2026, 3, 1, tzinfo=UTC)
    base = {"from": iso(start)}
    cases = [
        {**base, "to": iso(start + timedelta(days=31, seconds=1))},
        {**base, "to": iso(start)},
        {**base, "to": "2026-03-02T00:00:00"},  # no offset
        {"from": iso(start + timedelta(days=40))},  # `to` defaults to now: before `from`
        {**base, "to": iso(start + MIN), "limit": 1001},
    ]
    for params in cases:
        r = await client.get(URL.format(s.id), params=params, headers=auth())
        assert r.status_code == 422, (params, r.text)
    ok = {**base, "to": iso(start + timedelta(days=31))}
    assert (await client.get(URL.format(s.id), params=ok, headers=auth())).status_code == 200
    r = await client.get(URL.format(s.id), headers=auth())  # the last 24 h by default
    assert (r.json()["from"], r.json()["to"]) == ("2026-03-01T09:00:30Z", "2026-03-02T09:00:30Z")
    r = await client.get(URL.format(s.id), params={**ok, "cursor": "bogus"}, headers=auth())
    assert r.status_code == 400
    for sid, who in ((s.id, "tenant-b"), ("sch_unknown", "tenant-a")):
        r = await client.get(URL.format(sid), params=ok, headers=auth(who))
        assert r.status_code == 404, r.text
