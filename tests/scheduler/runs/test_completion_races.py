"""Completion callbacks at their edges: a call that races the worker's write of the acceptance,
a buffer_one successor waiting for an awaiting run, the delivery's completion headers (present,
not overridable by the tenant), and two watchdogs on one PostgreSQL database failing each
overdue run exactly once."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import sqlalchemy as sa

import webhookdeliver as wd
from scheduler.adapters.db.tables import delivery_attempts, runs
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.claiming import BUFFER_RECHECK
from scheduler.domain.policies import OverlapPolicy
from scheduler.service_layer.completion import time_out_overdue
from scheduler.service_layer.runs import trigger_run
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from tests.scheduler.conftest import auth
from tests.scheduler.runs.completion_helpers import add_callback_schedule, complete, completion_of
from tests.scheduler.runs.conftest import ManualClock, add_schedule, make_container
from tests.scheduler.runs.dispatch_helpers import make_dispatcher, plan_at_occurrence, rows, step
from tests.scheduler.runs.receiver import Receiver


async def until(predicate: object, *, seconds: float = 10.0) -> None:
    assert callable(predicate)
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_a_call_before_the_acceptance_is_written_is_told_to_retry(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_callback_schedule(container, receiver.url("/hang"))
    await plan_at_occurrence(uows, mclock, s)
    d = make_dispatcher(container, uows, deliverer)
    claimed, _ = await d.pipeline.pump()  # the attempt is under way: the receiver holds it
    assert claimed == 1
    await until(lambda: len(receiver.requests) == 1)
    run_id, _, token = completion_of(receiver)

    early = await complete(client, run_id, token, status="succeeded")
    assert early.status_code == 503, early.text
    assert early.headers["Retry-After"] == "1"
    forged = await complete(client, run_id, "rct_forged", status="succeeded")
    assert forged.status_code == 401  # still authenticated first

    receiver.hang_forever.set()  # the receiver answers 200: accepted
    await d.pipeline.drain()
    done = await complete(client, run_id, token, status="succeeded")
    assert done.status_code == 200
    assert done.json()["status"] == "succeeded"


async def test_a_buffer_one_successor_waits_for_the_awaiting_run(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    # A deadline 90 s after the acceptance: sooner than the successor's BUFFER_RECHECK net.
    s = await add_callback_schedule(
        container, receiver.url("/accept"), overlap=OverlapPolicy.BUFFER_ONE, timeout_seconds=90
    )
    await plan_at_occurrence(uows, mclock, s)
    d = make_dispatcher(container, uows, deliverer)
    assert await step(d) == 1
    first, _, token = completion_of(receiver)

    async with uows() as uow:
        reloaded = await uow.schedules.get("tenant-a", s.id)
    assert reloaded is not None
    await plan_at_occurrence(uows, mclock, reloaded)  # the next minute's run comes due
    assert await step(d) == 1  # claimed, and parked: its predecessor is unfinished
    assert len(receiver.requests) == 1
    (second,) = await rows(container, runs, runs.c.id != first)
    assert second.status == "pending"
    # Parked until its predecessor next moves by itself: its completion deadline (an awaiting
    # run holds no lease), not the later BUFFER_RECHECK net.
    (awaiting,) = await rows(container, runs, runs.c.id == first)
    assert awaiting.completion_deadline < mclock() + BUFFER_RECHECK
    assert second.next_attempt_at == awaiting.completion_deadline

    assert (await complete(client, first, token, status="succeeded")).status_code == 200
    assert await step(d) == 1  # woken by the completion, at once
    assert len(receiver.requests) == 2
    assert receiver.requests[1].headers["X-Webhook-Id"] == second.id


async def test_completion_headers_are_ours_and_only_in_callback_mode(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    body = {
        "name": "n",
        "cron": "* * * * *",
        "timezone": "UTC",
        "target": {"url": receiver.url("/accept"), "headers": {"x-run-complete-token": "mine"}},
        "completion": {"mode": "callback", "timeout_seconds": 60},
    }
    refused = await client.post("/v1/schedules/", json=body, headers=auth())
    assert refused.status_code == 422
    assert "reserved" in refused.text
    # At send time too (the last line): a stored tenant header cannot replace ours.
    built = wd.build_headers(
        secrets=["whsec_a2V5"],
        webhook_id="run_1",
        event_type="schedule.triggered",
        attempt=1,
        timestamp=0,
        body=b"{}",
        user_agent="t",
        extra={"X-Run-Complete-Url": "https://evil.example", "X-Run-Complete-Token": "x"},
        context=wd.completion_headers(url="https://ours/v1/runs/run_1/complete", token="rct_t"),
    )
    assert built["X-Run-Complete-Url"] == "https://ours/v1/runs/run_1/complete"
    assert built["X-Run-Complete-Token"] == "rct_t"
    assert "x-run-complete-token" not in {k for k in built if k != "X-Run-Complete-Token"}

    callback = await add_callback_schedule(container, receiver.url("/accept"), name="cb")
    plain = await add_schedule(container, receiver.url("/ok"), name="plain")
    assert callback.next_run_at == plain.next_run_at
    await plan_at_occurrence(uows, mclock, callback)
    assert await step(make_dispatcher(container, uows, deliverer)) == 2
    by_path = {r.path: r.headers for r in receiver.requests}
    assert by_path["/accept"]["X-Team"] == "ops"  # the tenant's own header still goes
    assert by_path["/accept"]["X-Run-Complete-Token"].startswith("rct_")
    assert "X-Run-Complete-Url" not in by_path["/ok"]
    assert "X-Run-Complete-Token" not in by_path["/ok"]


@pytest.mark.postgres
async def test_two_watchdogs_fail_each_overdue_run_once(
    pg_url: str, receiver: Receiver, deliverer: wd.Deliverer
) -> None:
    clock = ManualClock()
    a, b = make_container(pg_url, clock), make_container(pg_url, clock)
    try:
        s = await add_callback_schedule(a, receiver.url("/accept"), timeout_seconds=60)
        ids = [
            (
                await trigger_run(
                    a.uow_factory, tenant_id="tenant-a", schedule_id=s.id, clock=clock
                )
            ).id
            for _ in range(30)
        ]
        d = make_dispatcher(a, a.uow_factory, deliverer, per_key_limit=30)
        assert await step(d) == 30
        clock.advance(seconds=61)

        async def watch(uows: UnitOfWorkFactory) -> int:
            total = 0
            while n := await time_out_overdue(uows, clock(), limit=4):
                total += n
            return total

        counts = await asyncio.gather(*(watch(c.uow_factory) for c in (a, b, a, b)))
        assert sum(counts) == 30
        statuses = {r.id: r.status for r in await rows(a, runs, runs.c.id.in_(ids))}
        assert set(statuses.values()) == {"retrying"}
        timed_out = await rows(
            a, delivery_attempts, delivery_attempts.c.error_kind == "completion_timeout"
        )
        assert sorted(r.run_id for r in timed_out) == sorted(ids)
        async with a.engine.connect() as conn:
            left = await conn.scalar(
                sa.select(sa.func.count())
                .select_from(runs)
                .where(runs.c.completion_deadline.is_not(None))
            )
        assert left == 0
    finally:
        await a.aclose()
        await b.aclose()


async def test_completion_is_part_of_the_definition_for_put_by_key_and_versions(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "name": "export",
        "cron": "0 3 * * *",
        "timezone": "UTC",
        "target": {"url": "https://example.com/hook"},
        "completion": {"mode": "callback", "timeout_seconds": 900},
    }
    first = await client.put("/v1/schedules/by-key/export", json=body, headers=auth())
    assert first.status_code == 201, first.text
    assert first.json()["completion"] == {
        "mode": "callback",
        "timeout_seconds": 900,
        "min_duration_seconds": None,
    }
    same = await client.put("/v1/schedules/by-key/export", json=body, headers=auth())
    assert same.json()["version"] == first.json()["version"]  # unchanged: no write
    body["completion"] = {"mode": "callback", "timeout_seconds": 900, "min_duration_seconds": 30}
    changed = await client.put("/v1/schedules/by-key/export", json=body, headers=auth())
    assert changed.json()["version"] == first.json()["version"] + 1
    sid = first.json()["id"]
    versions = (await client.get(f"/v1/schedules/{sid}/versions", headers=auth())).json()
    (change,) = versions["items"][0]["changes"]
    assert change["field"] == "completion"
    assert change["from"] == {"mode": "callback", "timeout_seconds": 900}
    assert change["to"] == {"mode": "callback", "timeout_seconds": 900, "min_duration_seconds": 30}
    bad = {**body, "completion": {"mode": "response", "timeout_seconds": 900}}
    refused = await client.put("/v1/schedules/by-key/export", json=bad, headers=auth())
    assert refused.status_code == 422
    assert "completion.timeout_seconds" in refused.text
