"""Backfill over HTTP (ASGI) against real databases: a dry run lists the occurrences in
(from, to] with whether each has a run and creates nothing; a backfill creates runs (trigger
backfill) for the others, a repeat creates nothing, include_existing runs them all again; at most
10,000 occurrences (422 "more than 10000"), and a short range costs what it holds; another
tenant's schedule is 404; the claim takes backfill runs only with what live runs due leave of
it."""

from __future__ import annotations

import time
from datetime import timedelta

import httpx

from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.run import Run, Trigger
from scheduler.entrypoints.api.app import app_from_container
from scheduler.service_layer import tenant_events
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import T0, add_schedule
from tests.scheduler.runs.dispatch_helpers import claim_runs
from tests.scheduler.tenant.conftest import entitlements_event

HOURLY = "0 * * * *"
# T0 is 09:00:30 UTC: (04:00:30, 09:00:30] holds 05:00, 06:00, 07:00, 08:00 and 09:00.
RANGE = {"from": "2026-03-02T04:00:30Z", "to": "2026-03-02T09:00:30Z"}
LEASE = timedelta(seconds=30)


async def _planned_run_at(
    uows: SqlUnitOfWorkFactory, tenant: str, schedule_id: str, h: int
) -> None:
    at = T0.replace(hour=h, minute=0, second=0)
    async with uows() as uow:
        run = Run.planned(tenant_id=tenant, schedule_id=schedule_id, scheduled_for=at, now=at)
        assert await uow.runs.insert_runs([run]) == 1
        await uow.commit()


async def _backfill_runs(client: httpx.AsyncClient, schedule_id: str) -> list[dict[str, object]]:
    r = await client.get(
        f"/v1/schedules/{schedule_id}/runs", params={"trigger": "backfill"}, headers=auth()
    )
    assert r.status_code == 200, r.text
    items: list[dict[str, object]] = r.json()["items"]
    return items


async def test_dry_run_lists_the_occurrences_and_creates_nothing(
    client: httpx.AsyncClient, container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x", cron=HOURLY)
    await _planned_run_at(uows, "tenant-a", s.id, 7)
    r = await client.post(
        f"/v1/schedules/{s.id}/backfill", json={**RANGE, "dry_run": True}, headers=auth()
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["timezone"] == "UTC"
    assert [i["utc"] for i in body["items"]] == [f"2026-03-02T0{h}:00:00Z" for h in (5, 6, 7, 8, 9)]
    assert [i["exists"] for i in body["items"]] == [False, False, True, False, False]
    assert {i["dst"] for i in body["items"]} == {None}
    assert await _backfill_runs(client, s.id) == []


async def test_backfill_is_idempotent_unless_include_existing(
    client: httpx.AsyncClient, container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x", cron=HOURLY)
    await _planned_run_at(uows, "tenant-a", s.id, 7)
    path = f"/v1/schedules/{s.id}/backfill"

    first = await client.post(path, json=RANGE, headers=auth())
    assert (first.status_code, first.json()) == (202, {"created": 4, "existing": 1}), first.text
    made = await _backfill_runs(client, s.id)
    assert sorted(str(r["scheduled_for"]) for r in made) == [
        f"2026-03-02T0{h}:00:00Z" for h in (5, 6, 8, 9)
    ]
    assert {r["trigger"] for r in made} == {"backfill"}
    assert {r["status"] for r in made} == {"pending"}

    again = await client.post(path, json=RANGE, headers=auth())
    assert (again.status_code, again.json()) == (202, {"created": 0, "existing": 5})
    assert len(await _backfill_runs(client, s.id)) == 4

    every = await client.post(path, json={**RANGE, "include_existing": True}, headers=auth())
    assert (every.status_code, every.json()) == (202, {"created": 5, "existing": 5})
    assert len(await _backfill_runs(client, s.id)) == 9


async def test_more_than_ten_thousand_occurrences_is_422_naming_both(
    client: httpx.AsyncClient, container: Container
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x", cron="* * * * *")
    start = T0 - timedelta(minutes=10_001)
    body = {"from": start.isoformat(), "to": T0.isoformat()}
    r = await client.post(f"/v1/schedules/{s.id}/backfill", json=body, headers=auth())
    assert r.status_code == 422, r.text
    assert "more than 10000" in r.text, r.text  # counting stops one past the limit
    assert await _backfill_runs(client, s.id) == []
    # 10,000 exactly is allowed (a dry run: nothing stored).
    body["from"] = (T0 - timedelta(minutes=10_000)).isoformat()
    ok = await client.post(
        f"/v1/schedules/{s.id}/backfill", json={**body, "dry_run": True}, headers=auth()
    )
    assert ok.status_code == 200, ok.text
    assert len(ok.json()["items"]) == 10_000


async def test_a_one_hour_backfill_of_every_minute_costs_what_it_holds(
    client: httpx.AsyncClient, container: Container
) -> None:
    # The walk stops at `to`: 60 occurrences, not the 10,001 (once 100,001: 0.29 s of CPU) a
    # walk to the limit computes. CPU time of this process (threads included), not wall time:
    # the machine's load does not inflate it. The first request warms the caches.
    s = await add_schedule(container, "http://127.0.0.1:9/x", cron="* * * * *")
    body = {"from": (T0 - timedelta(hours=1)).isoformat(), "to": T0.isoformat(), "dry_run": True}
    path = f"/v1/schedules/{s.id}/backfill"
    assert (await client.post(path, json=body, headers=auth())).status_code == 200
    spent = []
    for _ in range(3):
        cpu = time.process_time()
        r = await client.post(path, json=body, headers=auth())
        spent.append(time.process_time() - cpu)
        assert r.status_code == 200, r.text
        assert len(r.json()["items"]) == 60
    assert min(spent) < 0.05, spent


async def test_another_tenants_schedule_is_404_and_untouched(
    client: httpx.AsyncClient, container: Container
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x", cron=HOURLY)
    for extra in ({"dry_run": True}, {}):
        r = await client.post(
            f"/v1/schedules/{s.id}/backfill", json={**RANGE, **extra}, headers=auth("tenant-b")
        )
        assert r.status_code == 404, r.text
    assert await _backfill_runs(client, s.id) == []


async def test_backfill_counts_toward_max_runs_per_day(
    client: httpx.AsyncClient, container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    # Three runs a day: the planned 07:00 run and five backfilled occurrences would be six.
    await tenant_events.apply_events(
        uows(), [entitlements_event("tenant-a", T0, {"max_runs_per_day": 3})], T0
    )
    s = await add_schedule(container, "http://127.0.0.1:9/x", cron=HOURLY)
    await _planned_run_at(uows, "tenant-a", s.id, 7)
    path = f"/v1/schedules/{s.id}/backfill"
    r = await client.post(path, json={**RANGE, "include_existing": True}, headers=auth())
    assert r.status_code == 403, r.text  # a quota refusal, like every other limit
    assert (r.json()["limit"], r.json()["current"]) == ("max_runs_per_day", 6)
    assert await _backfill_runs(client, s.id) == []
    # Two more fit: (06:30, 08:30] holds 07:00 (has a run) and 08:00.
    small = {"from": "2026-03-02T06:30:00Z", "to": "2026-03-02T08:30:00Z"}
    ok = await client.post(path, json=small, headers=auth())
    assert (ok.status_code, ok.json()) == (202, {"created": 1, "existing": 1}), ok.text


async def test_bad_ranges_are_422(client: httpx.AsyncClient, container: Container) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x", cron=HOURLY)
    path = f"/v1/schedules/{s.id}/backfill"
    for body in (
        {"from": RANGE["to"], "to": RANGE["from"]},  # from after to
        {"from": RANGE["from"], "to": "2026-03-02T09:00:30"},  # no offset
        {"from": RANGE["from"], "to": (T0 + timedelta(hours=1)).isoformat()},  # future
    ):
        r = await client.post(path, json=body, headers=auth())
        assert r.status_code == 422, (body, r.text)


async def test_backfill_runs_are_claimed_only_after_the_live_runs_due(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    # 30 backfill runs due long ago and 10 live runs due now: a claim of 8 takes live runs only;
    # the next claim of 8 takes the 2 live runs left, then 6 backfill runs.
    old = T0 - timedelta(days=3)
    backfill = [
        Run.planned(
            tenant_id="tenant-a",
            schedule_id="sch_x",
            scheduled_for=old + timedelta(hours=i),
            now=old,
            trigger=Trigger.BACKFILL,
            due_at=old,
        )
        for i in range(30)
    ]
    for r in backfill:
        r.backfill_id = "bfl_once"
    live = [
        Run.planned(
            tenant_id=f"tenant-{i % 2}",
            schedule_id=f"sch_{i}",
            scheduled_for=T0,
            now=T0,
            trigger=Trigger.MANUAL,
        )
        for i in range(10)
    ]
    async with uows() as uow:
        assert await uow.runs.insert_runs(backfill + live) == 40
        await uow.commit()
    now = T0 + timedelta(seconds=1)
    got: list[list[Trigger]] = []
    for _ in range(2):
        async with uows() as uow:
            claimed = await claim_runs(uow.runs, "w:1", now, now + LEASE, 8)
            await uow.commit()
        got.append(sorted(r.trigger for r in claimed))
    assert got[0] == [Trigger.MANUAL] * 8
    assert got[1] == [Trigger.BACKFILL] * 6 + [Trigger.MANUAL] * 2


async def test_openapi_documents_both_answers(container: Container) -> None:
    # The app as served.
    spec = app_from_container(container).openapi()
    op = spec["paths"]["/v1/schedules/{schedule_id}/backfill"]["post"]
    answers = op["responses"]
    assert answers["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/BackfillPreviewOut"
    )
    assert answers["202"]["content"]["application/json"]["schema"]["$ref"].endswith("/BackfillOut")
    assert "application/problem+json" in answers["422"]["content"]
    body = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    fields = spec["components"]["schemas"][body.rsplit("/", 1)[1]]["properties"]
    assert set(fields) == {"from", "to", "dry_run", "include_existing"}
