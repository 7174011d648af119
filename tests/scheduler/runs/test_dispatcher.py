"""The dispatcher against real databases and a real loopback receiver, driven step by step with
a manual clock: success, retries with backoff, Retry-After, timeouts, redirects, the breaker,
leases, claim-time skips."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import timedelta

import pytest
import sqlalchemy as sa

import webhookdeliver as wd
from scheduler.adapters.db.tables import delivery_attempts, outbox, schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from scheduler.domain.policies import Action, OverlapPolicy
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer import schedules as schedule_svc
from scheduler.service_layer.planning_service import PlanningSettings, plan_due
from scheduler.service_layer.runs import trigger_run
from tests.scheduler.runs.conftest import SECRET, ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import (
    PLAN,
    attempt_rows,
    claim_runs,
    make_dispatcher,
    outbox_types,
    plan_at_occurrence,
    rows,
    run_rows,
    schedule_row,
    step,
)
from tests.scheduler.runs.receiver import Receiver


async def test_success_signs_and_records_the_attempt(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/ok"), payload={"report": "daily"})
    assert s.next_run_at is not None
    mclock.set(s.next_run_at - timedelta(seconds=5))
    await plan_due(uows, now=mclock(), settings=PLAN)
    d = make_dispatcher(container, uows, deliverer)
    assert await step(d) == 0  # planned ahead: never claimed before scheduled_for
    mclock.set(s.next_run_at)
    assert await step(d) == 1
    (run,) = await run_rows(container)
    assert (run.status, run.attempt_count, run.lease_owner) == ("succeeded", 1, None)
    (seen,) = receiver.requests
    assert seen.headers["X-Webhook-Id"] == run.id
    assert seen.headers["X-Event-Type"] == "schedule.triggered"
    assert seen.headers["X-Attempt"] == "1"
    assert json.loads(seen.body) == {"report": "daily"}
    assert wd.verify([SECRET], seen.headers, seen.body)
    (attempt,) = await attempt_rows(container, run.id)
    assert (attempt.number, attempt.status_code, attempt.error_kind) == (1, 200, None)
    assert attempt.response_excerpt == "ok"
    assert "schedule.run.succeeded" in await outbox_types(container)


async def test_fails_twice_then_succeeds_with_backoff_between(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/flaky/2"), max_attempts=5, initial_backoff=10)
    await plan_at_occurrence(uows, mclock, s)
    d = make_dispatcher(container, uows, deliverer)
    await step(d)
    (run,) = await run_rows(container)
    assert (run.status, run.attempt_count) == ("retrying", 1)
    delay = (run.next_attempt_at - mclock()).total_seconds()
    assert 0 <= delay <= 10  # full jitter within the first ceiling
    assert await step(d) == 0 or delay == 0  # not due yet (unless jitter drew 0)
    for _ in range(2):
        mclock.advance(seconds=60)
        await step(d)
    (run,) = await run_rows(container)
    assert (run.status, run.attempt_count) == ("succeeded", 3)
    got = [(a.number, a.status_code, a.error_kind) for a in await attempt_rows(container, run.id)]
    assert got == [(1, 500, "http_status"), (2, 500, "http_status"), (3, 200, None)]
    assert receiver.attempts_by_id[run.id] == 3  # same X-Webhook-Id on every attempt


async def test_exhausted_run_fails_and_breaker_pauses_schedule_with_alert(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(
        container, receiver.url("/fail"), max_attempts=1, threshold=2, name="billing-sync"
    )
    await plan_at_occurrence(uows, mclock, s)
    d = make_dispatcher(container, uows, deliverer)
    await step(d)
    assert (await schedule_row(container, s.id)).consecutive_failures == 1
    mclock.advance(minutes=1)
    await plan_due(uows, now=mclock(), settings=PLAN)
    await step(d)
    statuses = [r.status for r in await run_rows(container)]
    assert statuses == ["failed", "failed"]
    row = await schedule_row(container, s.id)
    assert (row.state, row.paused_reason, row.next_run_at) == ("paused", "breaker", None)
    types = await outbox_types(container)
    assert types.count("schedule.run.failed") == 2
    assert "schedule.paused" in types
    assert "alert.requested" in types
    # The alert names the schedule by its name and points at its runs (the dead letters).
    (alert,) = await rows(container, outbox, outbox.c.type == "alert.requested")
    assert alert.topic == "notification-requests"
    body = json.loads(alert.payload)["data"]
    assert body["template"] == "schedule_auto_paused"
    assert body["data"]["schedule_name"] == "billing-sync"
    assert body["data"]["runs_path"] == f"/v1/schedules/{s.id}/runs"
    assert "500" in body["data"]["last_error"]
    # What the alert's wording depends on: how many failed in a row, and how to resume.
    assert (body["data"]["consecutive_failures"], body["data"]["failure_threshold"]) == (2, 2)
    assert body["data"]["resume_path"] == f"/v1/schedules/{s.id}/resume"
    # Paused: nothing more is planned.
    mclock.advance(minutes=3)
    assert (await plan_due(uows, now=mclock(), settings=PLAN)).runs_inserted == 0


async def test_stored_attempt_text_is_bounded_by_webhookdeliver(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    """A receiver answering 6 KiB of three-byte characters: the attempt row keeps at most 1 KiB
    of UTF-8, cut on a character boundary (webhookdeliver's MAX_EXCERPT_BYTES, the one bound)."""
    s = await add_schedule(container, receiver.url("/big/2000"), max_attempts=1)
    await plan_at_occurrence(uows, mclock, s)
    await step(make_dispatcher(container, uows, deliverer))
    (attempt,) = await rows(container, delivery_attempts)
    excerpt = attempt.response_excerpt
    assert len(excerpt.encode()) <= wd.MAX_EXCERPT_BYTES
    assert excerpt.startswith("€" * 300)
    assert set(excerpt) <= {"€", "\ufffd"}
    assert attempt.status_code == 500


async def test_an_answer_with_nul_bytes_is_recorded_and_settles_its_batch(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    """PostgreSQL's text cannot hold NUL: the excerpt keeps U+FFFD in its place, so the run's
    attempt is written (before, the whole settle batch failed, its runs redone as lost)."""
    s = await add_schedule(container, receiver.url("/nul"), max_attempts=1)
    await plan_at_occurrence(uows, mclock, s)
    await step(make_dispatcher(container, uows, deliverer))
    (run,) = await run_rows(container)
    assert run.status == "succeeded"
    (attempt,) = await rows(container, delivery_attempts)
    assert attempt.response_excerpt == "ok\ufffd\ufffddone"


async def test_every_trigger_counts_for_the_breaker_and_success_resets_it(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/fail"), max_attempts=1, threshold=3)
    await plan_at_occurrence(uows, mclock, s)
    d = make_dispatcher(container, uows, deliverer)
    await step(d)
    await trigger_run(uows, tenant_id="tenant-a", schedule_id=s.id, clock=mclock)
    await step(d)
    row = await schedule_row(container, s.id)
    assert (row.consecutive_failures, row.state) == (2, "active")  # manual runs count too
    assert s.definition.target is not None
    await schedule_svc.update_schedule(
        container.uow_factory(),
        tenant_id="tenant-a",
        schedule_id=s.id,
        changes={"target": replace(s.definition.target, url=receiver.url("/ok"))},
        expected_version=None,
        clock=mclock,
        limits=Entitlements(min_interval_seconds=60),
    )
    await trigger_run(uows, tenant_id="tenant-a", schedule_id=s.id, clock=mclock)
    await step(d)
    row = await schedule_row(container, s.id)
    assert (row.consecutive_failures, row.state) == (0, "active")


async def test_retry_after_is_honoured(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/throttle/30"), initial_backoff=1)
    await plan_at_occurrence(uows, mclock, s)
    d = make_dispatcher(container, uows, deliverer)
    await step(d)
    (run,) = await run_rows(container)
    assert run.status == "retrying"
    # Retry-After 30 s raises the jittered delay (<= 1 s here) to 30 s, within the 60 s cap.
    assert (run.next_attempt_at - mclock()).total_seconds() == pytest.approx(30, abs=0.01)
    mclock.advance(seconds=29)
    assert await step(d) == 0
    mclock.advance(seconds=1)
    await step(d)
    assert (await run_rows(container))[0].status == "succeeded"


async def test_redirect_is_a_failure_and_not_followed(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/redirect"))
    await plan_at_occurrence(uows, mclock, s)
    await step(make_dispatcher(container, uows, deliverer))
    (run,) = await run_rows(container)
    assert run.status == "failed"  # 3xx is not retryable
    (attempt,) = await attempt_rows(container, run.id)
    assert (attempt.status_code, attempt.error_kind) == (302, "http_status")
    assert [r.path for r in receiver.requests] == ["/redirect"]  # /ok never reached


async def test_hanging_receiver_times_out_and_does_not_stall_others(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    # "localhost" and "127.0.0.1" are two destinations on the same receiver.
    hang_url = receiver.url("/hang").replace("127.0.0.1", "localhost")
    slow = [
        await add_schedule(container, hang_url, timeout_seconds=3, name=f"slow{i}")
        for i in range(5)
    ]
    fast = [await add_schedule(container, receiver.url("/ok"), name=f"f{i}") for i in range(20)]
    await plan_at_occurrence(uows, mclock, slow[0])
    d = make_dispatcher(container, uows, deliverer, concurrency=4, per_key_limit=2, max_claimed=50)
    await d.pipeline.pump()

    async def fast_done() -> None:
        while len(receiver.ids_at("/ok")) < 20:
            # Runs the destination's limit deferred come due again (flow control).
            mclock.advance(seconds=1)
            await d.pipeline.write_once()  # ended attempts are no longer in flight
            await d.pipeline.pump()
            await asyncio.sleep(0.01)

    # The hanging runs hold at most 2 attempts (their destination's default limit, this
    # worker's own slots); the other destination's 2 serve all 20 fast runs long before the 3 s
    # timeout.
    await asyncio.wait_for(fast_done(), 2.5)
    assert len(receiver.ids_at("/hang")) == 2
    assert receiver.max_active <= 4
    await asyncio.wait_for(d.pipeline.drain(), 15)  # the other 3 hang in turn, 2 at a time
    by_schedule = {r.schedule_id: r for r in await run_rows(container)}
    assert all(by_schedule[f.id].status == "succeeded" for f in fast)
    for s in slow:
        hung = by_schedule[s.id]
        assert hung.status == "retrying"
        attempts = await attempt_rows(container, hung.id)
        assert [a.error_kind for a in attempts] == ["timeout"]


async def test_expired_lease_is_claimable_by_another_worker_and_loser_write_dropped(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/ok"))
    await plan_at_occurrence(uows, mclock, s)
    dead = make_dispatcher(container, uows, deliverer, lease_seconds=30)
    now = mclock()
    async with uows() as uow:  # worker A claims and then "dies"
        (claimed,) = await claim_runs(uow.runs, "A:1", now, now + timedelta(seconds=30), 10)
        await uow.commit()
    alive = make_dispatcher(container, uows, deliverer, lease_seconds=30)
    mclock.advance(seconds=29)
    assert await step(alive) == 0  # lease still valid
    mclock.advance(seconds=2)
    assert await step(alive) == 1
    (run,) = await run_rows(container)
    assert run.status == "succeeded"
    # A comes back and tries to write its own result: dropped, the run stays as B left it.
    from scheduler.domain.run import AttemptOutcome
    from scheduler.service_layer.settle import Completion, settle_completions

    claimed.record_attempt(
        "A:1",
        AttemptOutcome(ok=False, started_at=now, duration_ms=1, error_kind="timeout"),
        mclock(),
        None,
    )
    report = await settle_completions(uows, [Completion.of(claimed, "A:1")], mclock())
    assert report.lost == [claimed.id]
    assert (await run_rows(container))[0].status == "succeeded"
    # A's attempt is recorded as lost (B counted it when it took the run over), B's as attempt 2.
    got = [(a.number, a.error_kind) for a in await attempt_rows(container, run.id)]
    assert got == [(1, "worker_lost"), (2, None)]
    del dead


async def test_claim_time_skips_paused_schedule_and_overlap(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    paused = await add_schedule(container, receiver.url("/ok"), name="paused")
    over = await add_schedule(
        container, receiver.url("/hang"), overlap=OverlapPolicy.SKIP, timeout_seconds=1
    )
    assert paused.next_run_at is not None
    mclock.set(paused.next_run_at - timedelta(seconds=5))
    await plan_due(uows, now=mclock(), settings=PlanningSettings(lookahead=timedelta(minutes=2)))
    await schedule_svc.pause_schedule(
        container.uow_factory(),
        tenant_id="tenant-a",
        schedule_id=paused.id,
        reason="maintenance",
        expected_version=None,
        clock=mclock,
    )
    mclock.advance(seconds=65)  # both occurrences of `over` (planned ahead) are now due
    await step(make_dispatcher(container, uows, deliverer))
    got = {(r.schedule_id, r.scheduled_for): r for r in await run_rows(container)}
    paused_runs = [r for (sid, _), r in got.items() if sid == paused.id]
    assert {(r.status, r.skip_reason) for r in paused_runs} == {("skipped", "schedule_paused")}
    over_runs = sorted(
        (r for r in got.values() if r.schedule_id == over.id), key=lambda r: r.scheduled_for
    )
    assert [(r.status, r.skip_reason) for r in over_runs] == [
        ("retrying", None),
        ("skipped", "overlap"),
    ]
    assert receiver.ids_at("/ok") == set()


async def test_event_action_publishes_schedule_triggered_with_an_object_for_a_null_payload(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    deliverer: wd.Deliverer,
) -> None:
    """The dispatcher's event performer is the production one: the run succeeds once the bus
    took `schedule.triggered`, which is published directly (not through the outbox), and a
    null payload becomes `data: {}`."""
    assert container.bus is not None
    consumer = container.bus.consumer([SCHEDULE_EVENTS_TOPIC], "test-triggered")
    await consumer.start()
    await container.publisher.start()
    try:
        s = await add_schedule(container, None, action=Action.EVENT)
        async with container.engine.begin() as conn:  # a schedule whose payload is null
            await conn.execute(
                sa.update(schedules).where(schedules.c.id == s.id).values(payload=None)
            )
        await plan_at_occurrence(uows, mclock, s)
        await step(make_dispatcher(container, uows, deliverer))
        records = await consumer.poll(max_records=100, timeout_seconds=1.0)
    finally:
        await container.publisher.stop()
        await consumer.stop()
    (run,) = await run_rows(container)
    assert run.status == "succeeded"
    triggered = [e for e in map(json.loads, (r.value for r in records))]
    triggered = [e for e in triggered if e["type"] == "schedule.triggered"]
    assert [(e["run_id"], e["data"]) for e in triggered] == [(run.id, {})]
    assert "schedule.triggered" not in await outbox_types(container)
