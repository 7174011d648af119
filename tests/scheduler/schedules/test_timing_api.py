"""Timing through the API (DESIGN.md §7a): dst_policy, annotated occurrences, the stateless preview,
bounds, one-shot, max_runs, the completed state and jitter, on both databases, with the real
planner and claim statements."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from scheduler.adapters.db.tables import runs
from scheduler.bootstrap import Container
from scheduler.domain.tenant import Entitlements
from scheduler.domain.timing import jitter_offset
from scheduler.service_layer.planning_service import PlanningSettings, plan_due
from tests.scheduler.conftest import StepClock, auth
from tests.scheduler.runs.dispatch_helpers import claim_runs
from tests.scheduler.schedules.conftest import schedule_body

URL = "/v1/schedules/"
PREVIEW = URL + "preview"
# The StepClock starts at 2026-03-01T12:00Z; New York springs forward on 2026-03-08.
NY = {"timezone": "America/New_York"}


async def create(client: httpx.AsyncClient, **kw: object) -> dict:
    r = await client.post(URL, json=schedule_body(**kw), headers=auth())
    assert r.status_code == 201, r.text
    return r.json()


def timing_body(**kw: object) -> dict[str, object]:
    return {"cron": "30 2 * * *", **NY, **kw}


async def preview(client: httpx.AsyncClient, **kw: object) -> httpx.Response:
    return await client.post(PREVIEW, json=timing_body(**kw), headers=auth())


async def plan(container: Container, now: datetime) -> None:
    settings = PlanningSettings(lookahead=timedelta(seconds=60))
    while (await plan_due(container.uow_factory, now=now, settings=settings)).more_due:
        pass


async def run_rows(container: Container, schedule_id: str) -> list[sa.Row]:
    async with container.engine.connect() as conn:
        q = sa.select(runs).where(runs.c.schedule_id == schedule_id).order_by(runs.c.scheduled_for)
        return list(await conn.execute(q))


# ---- dst_policy and annotated occurrences ------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "march_8"),
    [
        (
            "shift",
            {"at": "2026-03-08T03:00:00-04:00", "utc": "2026-03-08T07:00:00Z", "dst": "shifted"},
        ),
        ("skip", None),
        ("literal", None),
    ],
)
async def test_occurrences_follow_the_dst_policy(
    client: httpx.AsyncClient, clock: StepClock, policy: str, march_8: dict | None
) -> None:
    clock.advance(days=6)  # 2026-03-07T12:00Z
    s = await create(client, cron="30 2 * * *", dst_policy=policy, **NY)
    assert s["dst_policy"] == policy
    r = await client.get(URL + s["id"] + "/occurrences", params={"count": 2}, headers=auth())
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    march_9 = {"at": "2026-03-09T02:30:00-04:00", "utc": "2026-03-09T06:30:00Z", "dst": None}
    assert items[0] == (march_8 or march_9)
    assert march_9 in items
    assert all("due_at" not in i for i in items)  # no jitter: no due_at


async def test_literal_fires_both_passes_and_patch_changes_the_policy(
    client: httpx.AsyncClient, clock: StepClock
) -> None:
    clock.advance(days=244)  # 2026-10-31T12:00Z; New York falls back on 2026-11-01
    s = await create(client, cron="30 1 * * *", dst_policy="literal", **NY)
    r = await client.get(URL + s["id"] + "/occurrences", params={"count": 3}, headers=auth())
    assert [(i["at"], i["dst"]) for i in r.json()["items"]] == [
        ("2026-11-01T01:30:00-04:00", "first_pass"),
        ("2026-11-01T01:30:00-05:00", "second_pass"),
        ("2026-11-02T01:30:00-05:00", None),
    ]
    r = await client.patch(URL + s["id"], json={"dst_policy": "skip"}, headers=auth())
    assert r.status_code == 200, r.text
    assert r.json()["dst_policy"] == "skip"
    r = await client.get(URL + s["id"] + "/occurrences", params={"count": 2}, headers=auth())
    assert [(i["at"], i["dst"]) for i in r.json()["items"]] == [
        ("2026-11-01T01:30:00-04:00", "first_pass"),
        ("2026-11-02T01:30:00-05:00", None),
    ]


# ---- the stateless preview ---------------------------------------------------------------------


async def test_preview_answers_annotated_occurrences_and_stores_nothing(
    client: httpx.AsyncClient,
) -> None:
    r = await preview(client, after="2026-03-07T12:00:00Z", count=2)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "timezone": "America/New_York",
        "items": [
            {"at": "2026-03-08T03:00:00-04:00", "utc": "2026-03-08T07:00:00Z", "dst": "shifted"},
            {"at": "2026-03-09T02:30:00-04:00", "utc": "2026-03-09T06:30:00Z", "dst": None},
        ],
    }
    listed = await client.get(URL, headers=auth())
    assert listed.json()["items"] == []


async def test_preview_needs_a_token(client: httpx.AsyncClient) -> None:
    r = await client.post(PREVIEW, json=timing_body())
    assert r.status_code == 401


async def test_preview_shows_due_at_with_jitter_and_honours_bounds(
    client: httpx.AsyncClient,
) -> None:
    r = await preview(
        client,
        cron="0 * * * *",
        jitter_seconds=600,
        start_at="2026-03-02T00:00:00Z",
        max_runs=3,
        after="2026-03-01T00:00:00Z",
        count=10,
    )
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert [i["utc"] for i in items] == [
        "2026-03-02T00:00:00Z",
        "2026-03-02T01:00:00Z",
        "2026-03-02T02:00:00Z",
    ]
    for item in items:
        utc = datetime.fromisoformat(item["utc"])
        due = datetime.fromisoformat(item["due_at"])
        assert timedelta(0) <= due - utc <= timedelta(seconds=600)


BAD_TIMING = [
    ({"cron": None}, "cron"),  # neither cron nor run_at
    ({"run_at": "2026-03-05T00:00:00Z"}, "cron"),  # both
    ({"dst_policy": "later"}, "dst_policy"),
    ({"cron": "*/5 * * * *", "jitter_seconds": 300}, "jitter_seconds"),  # smallest gap 300 s
    ({"jitter_seconds": 3601}, "jitter_seconds"),
    ({"max_runs": 0}, "max_runs"),
    ({"start_at": "2026-03-05T00:00:00"}, "start_at"),  # no offset
    ({"end_at": "2026-03-05T00:00:00"}, "end_at"),
    ({"start_at": "2026-03-05T00:00:00Z", "end_at": "2026-03-05T00:00:00Z"}, "end_at"),
    ({"end_at": "2026-03-01T11:00:00Z"}, "end_at"),  # leaves no occurrence after now
    (
        {"cron": "0 3 * * *", "start_at": "2026-03-05T04:00:00Z", "end_at": "2026-03-05T05:00:00Z"},
        "end_at",
    ),
    ({"cron": None, "run_at": "2026-03-01T11:58:00Z"}, "run_at"),  # more than 60 s ago
    ({"cron": None, "run_at": "2026-03-05T00:00:00"}, "run_at"),
    ({"cron": "0 0 30 2 *"}, "cron"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"cron": "0 * * * MON-SUN-TUE"}, "cron"),
]


@pytest.mark.parametrize(("fields", "field"), BAD_TIMING)
async def test_bad_timing_is_a_422_naming_the_field_on_create_and_preview(
    client: httpx.AsyncClient, fields: dict[str, object], field: str
) -> None:
    created = await client.post(
        URL, json=schedule_body(**{**timing_body(), **fields}), headers=auth()
    )
    previewed = await client.post(PREVIEW, json={**timing_body(), **fields}, headers=auth())
    for r in (created, previewed):
        assert r.status_code == 422, r.text
        assert r.json()["field"] == field, r.json()
    assert created.json()["errors"] == previewed.json()["errors"]  # the same validation


async def test_preview_count_is_at_most_100(client: httpx.AsyncClient) -> None:
    r = await preview(client, count=101)
    assert r.status_code == 422
    assert r.json()["field"] == "count"
    assert (await preview(client, count=100)).status_code == 200


# ---- description, bounds and the response ------------------------------------------------------


async def test_timing_fields_and_description_round_trip(client: httpx.AsyncClient) -> None:
    s = await create(
        client,
        description="Nightly report for the ops team",
        start_at="2026-03-03T00:00:00+01:00",
        end_at="2026-04-01T00:00:00Z",
        max_runs=5,
        jitter_seconds=30,
        **NY,
    )
    assert s["description"] == "Nightly report for the ops team"
    assert s["start_at"] == "2026-03-02T23:00:00Z"
    assert s["end_at"] == "2026-04-01T00:00:00Z"
    assert (s["max_runs"], s["jitter_seconds"], s["run_at"]) == (5, 30, None)
    assert s["next_run_at"] == "2026-03-03T08:00:00Z"  # 03:00 New York, the first after start_at
    r = await client.patch(
        URL + s["id"], json={"description": None, "max_runs": None}, headers=auth()
    )
    assert r.status_code == 200, r.text
    assert (r.json()["description"], r.json()["max_runs"]) == (None, None)
    too_long = await client.patch(URL + s["id"], json={"description": "x" * 1001}, headers=auth())
    assert too_long.status_code == 422
    assert too_long.json()["field"] == "description"


async def test_mon_sun_is_accepted(client: httpx.AsyncClient) -> None:
    s = await create(client, cron="0 9 * * MON-SUN", timezone="UTC")
    assert s["next_run_at"] == "2026-03-02T09:00:00Z"


# ---- one-shot, max_runs and the completed state ------------------------------------------------


async def test_one_shot_runs_once_then_completes(
    client: httpx.AsyncClient, container: Container, clock: StepClock
) -> None:
    s = await create(client, cron=None, run_at="2026-03-01T12:30:00+00:00", timezone="UTC")
    assert (s["cron"], s["run_at"], s["next_run_at"]) == (
        None,
        "2026-03-01T12:30:00Z",
        "2026-03-01T12:30:00Z",
    )
    r = await client.get(URL + s["id"] + "/occurrences", headers=auth())
    assert [i["utc"] for i in r.json()["items"]] == ["2026-03-01T12:30:00Z"]
    await plan(container, datetime(2026, 3, 1, 12, 29, 30, tzinfo=UTC))
    rows = await run_rows(container, s["id"])
    assert [(r.scheduled_for, r.status) for r in rows] == [
        (datetime(2026, 3, 1, 12, 30, tzinfo=UTC), "pending")
    ]
    got = (await client.get(URL + s["id"], headers=auth())).json()
    assert (got["state"], got["next_run_at"]) == ("completed", None)
    async with container.engine.connect() as conn:
        types = [t for (t,) in await conn.execute(sa.text("SELECT type FROM outbox ORDER BY id"))]
    assert "schedule.completed" in types
    # Resume says why it cannot; pause too.
    r = await client.post(URL + s["id"] + "/resume", headers=auth())
    assert r.status_code == 409
    assert "completed" in r.json()["detail"]
    assert (await client.post(URL + s["id"] + "/pause", headers=auth())).status_code == 409
    # Listed with ?state=completed, not with ?state=active.
    done = (await client.get(URL, params={"state": "completed"}, headers=auth())).json()["items"]
    active = (await client.get(URL, params={"state": "active"}, headers=auth())).json()["items"]
    assert [i["id"] for i in done] == [s["id"]]
    assert active == []
    # A PATCH that makes an occurrence possible again returns it to active.
    r = await client.patch(URL + s["id"], json={"run_at": "2026-03-02T00:00:00Z"}, headers=auth())
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["next_run_at"]) == ("active", "2026-03-02T00:00:00Z")


async def test_max_runs_counts_planned_occurrences_skipped_ones_included(
    client: httpx.AsyncClient, container: Container
) -> None:
    s = await create(client, cron="* * * * *", timezone="UTC", max_runs=3, misfire_policy="skip")
    # Ten minutes late: the first occurrences are missed (skipped), and still count.
    await plan(container, datetime(2026, 3, 1, 12, 10, 30, tzinfo=UTC))
    rows = await run_rows(container, s["id"])
    assert len(rows) == 3
    assert {r.status for r in rows} == {"skipped"}
    got = (await client.get(URL + s["id"], headers=auth())).json()
    assert got["state"] == "completed"
    # More room: active again, planning resumes from now.
    r = await client.patch(URL + s["id"], json={"max_runs": 4}, headers=auth())
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "active"
    lowered = await client.patch(URL + s["id"], json={"max_runs": 2}, headers=auth())
    assert lowered.status_code == 422
    assert lowered.json()["field"] == "max_runs"


async def test_completed_schedules_do_not_count_toward_max_schedules(
    app: FastAPI, client: httpx.AsyncClient, container: Container
) -> None:
    app.state.ctx.limits_for = lambda _t: Entitlements(max_schedules=1)
    one = await create(client, cron=None, run_at="2026-03-01T12:00:30Z", timezone="UTC")
    refused = await client.post(URL, json=schedule_body(), headers=auth())
    assert refused.status_code == 403
    await plan(container, datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC))
    got = (await client.get(URL + one["id"], headers=auth())).json()
    assert got["state"] == "completed"
    assert (await client.post(URL, json=schedule_body(), headers=auth())).status_code == 201
    # Re-enabling the completed one would make two: refused by the quota.
    r = await client.patch(URL + one["id"], json={"run_at": "2026-03-05T00:00:00Z"}, headers=auth())
    assert r.status_code == 403
    assert r.json()["limit"] == "max_schedules"


# ---- jitter ------------------------------------------------------------------------------------


async def test_jitter_sets_due_at_and_no_attempt_starts_before_it(
    client: httpx.AsyncClient, container: Container
) -> None:
    s = await create(client, cron="0 * * * *", timezone="UTC", jitter_seconds=1800)
    occurrence = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
    offset = jitter_offset(s["id"], occurrence, 1800)
    await plan(container, occurrence - timedelta(seconds=30))
    (row,) = await run_rows(container, s["id"])
    assert row.scheduled_for == occurrence
    assert row.due_at == occurrence + timedelta(seconds=offset)
    assert row.next_attempt_at == row.due_at
    # The same instant a second planner (or a re-plan) computes.
    assert jitter_offset(s["id"], occurrence, 1800) == offset
    # Shown on the run.
    listed = (await client.get(URL + s["id"] + "/runs", headers=auth())).json()["items"]
    assert listed[0]["scheduled_for"] == "2026-03-01T13:00:00Z"
    assert datetime.fromisoformat(listed[0]["due_at"]) == row.due_at
    # The claim does not take it before due_at, and does once it is due.
    lease = timedelta(seconds=30)
    before = row.due_at - timedelta(seconds=1)
    async with container.uow_factory() as uow:
        assert await claim_runs(uow.runs, "w1", before, before + lease, 10) == []
    async with container.uow_factory() as uow:
        claimed = await claim_runs(uow.runs, "w1", row.due_at, row.due_at + lease, 10)
        await uow.commit()
    assert [r.id for r in claimed] == [row.id]
