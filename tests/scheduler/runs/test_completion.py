"""Completion callbacks end to end (DESIGN.md §7b "Completion"), SQLite and PostgreSQL: a real
loopback receiver accepts (202), the test calls back as its job would, through the API; the
watchdog is driven with the manual clock (no sleeping)."""

from __future__ import annotations

from datetime import timedelta

import httpx
import orjson

import webhookdeliver as wd
from scheduler.adapters.db.tables import runs
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.completion import token_digest
from scheduler.domain.schedule import Schedule
from scheduler.service_layer.completion import CompletionWatchdog, time_out_overdue
from servicekit.data.timestamps import format_utc
from tests.scheduler.conftest import auth
from tests.scheduler.runs.completion_helpers import (
    add_callback_schedule,
    complete,
    completion_of,
    events,
)
from tests.scheduler.runs.conftest import ManualClock
from tests.scheduler.runs.dispatch_helpers import (
    attempt_rows,
    make_dispatcher,
    plan_at_occurrence,
    rows,
    step,
)
from tests.scheduler.runs.receiver import Receiver


async def run_row(container: Container, run_id: str) -> object:
    (row,) = await rows(container, runs, runs.c.id == run_id)
    return row


async def test_accepted_then_called_back_succeeds_with_detail_and_output(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_callback_schedule(container, receiver.url("/accept"), timeout_seconds=600)
    await plan_at_occurrence(uows, mclock, s)
    d = make_dispatcher(container, uows, deliverer)
    assert await step(d) == 1
    accepted_at = mclock()
    run_id, url, token = completion_of(receiver)
    assert url == f"http://127.0.0.1:8089/v1/runs/{run_id}/complete"
    assert token.startswith("rct_")
    assert len(token) > 40

    row = await run_row(container, run_id)
    assert (row.status, row.lease_owner, row.lease_expires_at) == ("in_progress", None, None)
    assert row.completion_deadline == accepted_at + timedelta(seconds=600)
    assert row.completion_token_hash == token_digest(token)  # only the digest is stored
    assert token not in orjson.dumps([str(v) for v in row]).decode()
    shown = (await client.get(f"/v1/schedules/{s.id}/runs/{run_id}", headers=auth())).json()
    assert shown["status"] == "in_progress"
    assert shown["completion_deadline"] == format_utc(accepted_at + timedelta(seconds=600))
    assert shown["attempts"][0]["status_code"] == 202

    # Awaiting holds no lease: long after a lease would have expired it is not claimed again.
    mclock.advance(seconds=300)
    assert await step(d) == 0
    assert len(receiver.requests) == 1

    r = await complete(
        client, run_id, token, status="succeeded", detail="3 rows", output={"rows": 3}
    )
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "succeeded"
    assert r.json()["replayed"] is False
    shown = (await client.get(f"/v1/schedules/{s.id}/runs/{run_id}", headers=auth())).json()
    assert shown["status"] == "succeeded"
    assert shown["completion_deadline"] is None
    assert (shown["completion_detail"], shown["completion_output"]) == ("3 rows", {"rows": 3})
    assert shown["completed_at"] == format_utc(accepted_at + timedelta(seconds=300))
    (attempt,) = shown["attempts"]
    assert attempt["error"] is None
    assert (attempt["completion_detail"], attempt["completion_output"]) == ("3 rows", {"rows": 3})
    assert attempt["completed_at"] == shown["completed_at"]
    listed = (await client.get(f"/v1/schedules/{s.id}/runs", headers=auth())).json()["items"]
    assert listed[0]["completion_output"] == {"rows": 3}

    # The same call again: 200, nothing written twice; another status: 409.
    again = await complete(client, run_id, token, status="succeeded", detail="other")
    assert again.status_code == 200
    assert again.json()["replayed"] is True
    assert len(await events(container, "schedule.run.succeeded")) == 1
    assert (await run_row(container, run_id)).completion_detail == "3 rows"
    conflict = await complete(client, run_id, token, status="failed")
    assert conflict.status_code == 409, conflict.text
    assert conflict.json()["type"].endswith("completion-conflict")
    (event,) = await events(container, "schedule.run.succeeded")
    data = orjson.loads(event.payload)["data"]
    assert data["completion"]["detail"] == "3 rows"
    assert data["too_fast"] is False


async def test_no_call_by_the_deadline_is_a_failed_attempt_then_a_retry(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_callback_schedule(container, receiver.url("/accept"), timeout_seconds=120)
    await plan_at_occurrence(uows, mclock, s)
    d = make_dispatcher(container, uows, deliverer)
    assert await step(d) == 1
    run_id, _, first_token = completion_of(receiver)
    deadline = mclock() + timedelta(seconds=120)

    assert await time_out_overdue(uows, deadline - timedelta(seconds=1)) == 0
    mclock.set(deadline)
    timed_out: list[int] = []  # the worker's counter (scheduler_completion_timeouts_total)
    watchdog = CompletionWatchdog(uows, mclock, on_timed_out=timed_out.append)
    assert await watchdog.step() is None  # one run: not a full batch, wait the interval
    assert timed_out == [1]
    assert await time_out_overdue(uows, mclock()) == 0  # once
    row = await run_row(container, run_id)
    assert row.status == "retrying"
    assert row.completion_deadline is None
    assert deadline < row.next_attempt_at <= deadline + timedelta(seconds=10)
    (a1,) = await attempt_rows(container, run_id)
    assert a1.error_kind == "completion_timeout"
    assert a1.completed_at == deadline
    assert not await events(container, "schedule.run.failed")  # retried, not failed

    # Too late for the first attempt: it already ended by its deadline.
    late = await complete(client, run_id, first_token, status="succeeded")
    assert late.status_code == 409

    mclock.set(row.next_attempt_at)
    assert await step(d) == 1
    assert len(receiver.requests) == 2
    _, _, second_token = completion_of(receiver)
    assert receiver.requests[1].headers["X-Attempt"] == "2"
    assert second_token != first_token
    # A retry's delivery carries a new token; the first one no longer works at all.
    assert (await complete(client, run_id, first_token, status="succeeded")).status_code == 401
    ok = await complete(client, run_id, second_token, status="succeeded")
    assert ok.status_code == 200
    assert ok.json()["status"] == "succeeded"
    numbers = [(a.number, a.error_kind) for a in await attempt_rows(container, run_id)]
    assert numbers == [(1, "completion_timeout"), (2, None)]


async def test_forged_tokens_and_other_runs_tokens_are_refused_alike(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    a = await add_callback_schedule(container, receiver.url("/accept"), name="a")
    b = await add_callback_schedule(container, receiver.url("/accept"), name="b")
    assert a.next_run_at == b.next_run_at
    await plan_at_occurrence(uows, mclock, a)
    assert await step(make_dispatcher(container, uows, deliverer)) == 2
    (run_a, _, token_a), (run_b, _, token_b) = (
        completion_of(receiver, 0),
        completion_of(receiver, 1),
    )

    answers = [
        await complete(client, run_a, "rct_" + "x" * 43, status="succeeded"),  # forged
        await complete(client, run_a, token_b, status="succeeded"),  # another run's
        await complete(client, "run_01JNOTAREALRUN000000000000", token_a, status="succeeded"),
        await client.post(f"/v1/runs/{run_a}/complete", json={"status": "succeeded"}),
        await complete(client, run_a, auth()["Authorization"].split()[1], status="succeeded"),
    ]
    assert [r.status_code for r in answers] == [401] * 5
    assert {r.json()["detail"] for r in answers} == {"the token is not valid for this run"}
    assert answers[0].headers["WWW-Authenticate"] == "Bearer"
    for run_id in (run_a, run_b):
        assert (await run_row(container, run_id)).status == "in_progress"  # untouched


async def test_failed_is_retried_unless_final_and_final_counts_for_the_breaker(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_callback_schedule(container, receiver.url("/accept"), threshold=1)
    await plan_at_occurrence(uows, mclock, s)
    d = make_dispatcher(container, uows, deliverer)
    assert await step(d) == 1
    run_id, _, token = completion_of(receiver)

    r = await complete(client, run_id, token, status="failed", detail="disk full")
    assert r.status_code == 200
    assert r.json()["status"] == "retrying"
    assert (await complete(client, run_id, token, status="failed")).json()["replayed"] is True
    (a1,) = await attempt_rows(container, run_id)
    assert (a1.error_kind, a1.error_message) == ("completion_failed", "disk full")

    mclock.set((await run_row(container, run_id)).next_attempt_at)
    assert await step(d) == 1
    _, _, token2 = completion_of(receiver)
    r = await complete(client, run_id, token2, status="failed", detail="bad input", final=True)
    assert r.status_code == 200
    assert r.json()["status"] == "failed"
    assert (await run_row(container, run_id)).status == "failed"
    (failed,) = await events(container, "schedule.run.failed")
    error = orjson.loads(failed.payload)["data"]["last_error"]
    assert error == {"kind": "completion_failed", "message": "bad input", "status_code": None}
    # failure_threshold 1: the failed run tripped the breaker (and asked for its alert).
    shown = (await client.get(f"/v1/schedules/{s.id}", headers=auth())).json()
    assert (shown["state"], shown["paused_reason"]) == ("paused", "breaker")
    mclock.advance(seconds=3600)
    assert await step(d) == 0  # final: no further attempt


async def test_too_fast_succeeds_flags_emits_and_alerts(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
) -> None:
    s = await add_callback_schedule(
        container, receiver.url("/accept"), min_duration_seconds=60, name="backup"
    )
    await plan_at_occurrence(uows, mclock, s)
    # The attempt's start is the deliverer's clock: the test's, here.
    clock = lambda: mclock().timestamp()  # noqa: E731
    async with wd.Deliverer(allow_private_networks=True, clock=clock) as deliverer:
        await _too_fast_flow(client, container, uows, mclock, receiver, deliverer, s.id)


async def _too_fast_flow(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
    schedule_id: str,
) -> None:
    s_id = schedule_id
    assert await step(make_dispatcher(container, uows, deliverer)) == 1
    run_id, _, token = completion_of(receiver)
    mclock.advance(seconds=5)
    r = await complete(client, run_id, token, status="succeeded")
    assert r.status_code == 200
    assert r.json()["too_fast"] is True
    shown = (await client.get(f"/v1/schedules/{s_id}/runs/{run_id}", headers=auth())).json()
    assert (shown["status"], shown["too_fast"]) == ("succeeded", True)
    (event,) = await events(container, "schedule.run.too_fast")
    assert event.topic == "schedule-events"
    data = orjson.loads(event.payload)["data"]
    assert data["min_duration_seconds"] == 60
    assert 4 < data["duration_seconds"] < 6
    (alert,) = await events(container, "alert.requested")
    request = orjson.loads(alert.payload)["data"]
    assert alert.topic == "notification-requests"
    assert request["template"] == "schedule_run_too_fast"
    assert request["channels"] == ["email", "in_app"]
    assert request["data"]["schedule_name"] == "backup"
    assert request["data"]["run_id"] == run_id
    # Not too fast: no flag, no event (another run of the same schedule, after 61 s).
    await plan_at_occurrence(uows, mclock, await _reloaded(container, s_id))
    assert await step(make_dispatcher(container, uows, deliverer)) == 1
    second, _, token2 = completion_of(receiver)
    mclock.advance(seconds=61)
    assert (await complete(client, second, token2, status="succeeded")).json()["too_fast"] is False
    assert len(await events(container, "schedule.run.too_fast")) == 1


async def _reloaded(container: Container, schedule_id: str) -> Schedule:
    async with container.uow_factory() as uow:
        s = await uow.schedules.get("tenant-a", schedule_id)
    assert s is not None
    return s


async def test_bounded_bodies_and_a_per_run_rate_limit(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_callback_schedule(container, receiver.url("/accept"))
    await plan_at_occurrence(uows, mclock, s)
    assert await step(make_dispatcher(container, uows, deliverer)) == 1
    run_id, _, token = completion_of(receiver)
    big = await complete(client, run_id, token, status="succeeded", output={"x": "y" * 16_400})
    assert big.status_code == 422
    assert "output" in big.text
    long = await complete(client, run_id, token, status="succeeded", detail="d" * 1001)
    assert long.status_code == 422
    odd = await complete(client, run_id, token, status="done")
    assert odd.status_code == 422
    assert (await run_row(container, run_id)).status == "in_progress"
    # 10 calls per run per minute (the three above count): the 11th is refused before the
    # token is even looked at.
    codes = [
        (await complete(client, run_id, "nope", status="succeeded")).status_code for _ in range(8)
    ]
    assert codes == [401] * 7 + [429]
    limited = await complete(client, run_id, token, status="succeeded")
    assert limited.status_code == 429
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
