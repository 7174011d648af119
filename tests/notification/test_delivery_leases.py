"""The delivery lease discipline: a completion is written only under the lease it was made
under, leases are renewed while attempts run, and two replicas on one database deliver every
delivery once (redelivering only after a lost lease)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from notification.service_layer.dispatch import DeliveryDispatcher
from notification.service_layer.ports import Clock
from tests.notification.api import deliveries, subscribe
from tests.notification.conftest import Harness, Receiver
from tests.notification.dispatch import deliver_due
from tests.notification.events import publish, schedule_event
from tests.notification.replica_fault import run_two_replicas
from tests.support.pg import fresh_postgres_database


def real_clock() -> datetime:
    return datetime.now(UTC)


def another_dispatcher(
    h: Harness, clock: Clock | None = None, **settings: Any
) -> DeliveryDispatcher:
    """A second dispatcher on the same database, as another replica would run it."""
    d = h.app.container.dispatcher
    return DeliveryDispatcher(
        d.store,
        d.client,
        d.subscriptions,
        d.backoff,
        d.health_policy,
        clock or d.clock,
        on_endpoint_disabled=d.on_endpoint_disabled,
        settings=replace(d.settings, **settings),
    )


async def one_due_delivery(h: Harness, receiver: Receiver) -> dict[str, Any]:
    sub = await subscribe(h, receiver.url)
    _, raw = schedule_event("t1", "schedule.run.failed")
    await publish(h.bus, "schedule-events", raw)
    assert await h.app.events.run_once() == 1
    return sub


async def test_completion_after_lease_loss_is_dropped_not_written(
    harness: Harness, receiver: Receiver
) -> None:
    h = harness
    sub = await one_due_delivery(h, receiver)
    first, second = h.app.container.dispatcher, another_dispatcher(h)
    receiver.delays = [1.0]  # the first attempt answers after the second one
    assert (await first.pipeline.pump())[0] == 1
    await asyncio.wait_for(receiver.arrived.wait(), 10)
    h.clock.advance(seconds=h.settings.dispatch_lease_seconds + 1)  # its lease ran out

    assert await deliver_due(second) == 1  # the other replica redoes it and writes
    await first.pipeline.drain()  # the late result finds the lease taken over: dropped

    assert (first.pipeline.dropped, second.pipeline.dropped) == (1, 0)
    [row] = await deliveries(h, sub["id"])
    assert row["status"] == "succeeded"
    # The first attempt is recorded as lost (the receiver did see it), the take-over's is next.
    assert row["attempt_count"] == 2
    assert [(a["number"], (a["error"] or {}).get("kind")) for a in row["attempts"]] == [
        (1, "worker_lost"),
        (2, None),
    ]
    assert len(receiver.requests) == 2  # at-least-once, same X-Webhook-Id
    assert len({hdrs["X-Webhook-Id"] for hdrs, _ in receiver.requests}) == 1
    assert [hdrs["X-Attempt"] for hdrs, _ in receiver.requests] == ["1", "2"]


async def claim_and_crash(h: Harness) -> None:
    """A dispatcher that claims every due delivery, then dies before attempting or releasing."""
    now = h.clock()
    store = h.app.container.dispatcher.store
    lease = timedelta(seconds=h.settings.dispatch_lease_seconds)
    assert len(await store.acquire_due_deliveries("crashed-owner", now, now + lease, 10)) == 1


async def test_a_delivery_taken_over_records_its_lost_attempt(
    harness: Harness, receiver: Receiver
) -> None:
    h = harness
    sub = await one_due_delivery(h, receiver)
    await claim_and_crash(h)
    claimed_at = h.clock()
    h.clock.advance(seconds=h.settings.dispatch_lease_seconds - 1)
    assert await deliver_due(another_dispatcher(h)) == 0  # still leased
    h.clock.advance(seconds=2)  # the lease ran out

    assert await deliver_due(another_dispatcher(h)) == 1
    [(headers, _)] = receiver.requests
    assert headers["X-Attempt"] == "2"  # the lost one may have reached the receiver
    [row] = await deliveries(h, sub["id"])
    assert row["status"] == "succeeded"
    assert row["attempt_count"] == 2
    lost, sent = row["attempts"]
    assert lost["number"] == 1
    assert lost["error"]["kind"] == "worker_lost"
    assert "lease" in lost["error"]["message"]
    assert lost["status_code"] is None
    assert lost["started_at"] == claimed_at.isoformat().replace("+00:00", "Z")
    assert sent["number"] == 2
    assert sent["error"] is None
    assert sent["status_code"] == 200


async def test_lost_attempts_count_toward_the_retry_budget(
    make_harness: Callable[..., Any], db_url: str, receiver: Receiver
) -> None:
    h: Harness = await make_harness(db_url, retry_max_attempts=2)
    sub = await one_due_delivery(h, receiver)
    for _ in range(2):  # two claims lost in a row: the budget of 2 attempts is spent
        await claim_and_crash(h)
        h.clock.advance(seconds=h.settings.dispatch_lease_seconds + 1)
    assert await deliver_due(another_dispatcher(h)) == 1

    # Dead at the take-over, not attempted a third time (a delivery that takes its worker
    # down would otherwise be retried for ever).
    assert receiver.requests == []
    [row] = await deliveries(h, sub["id"])
    assert row["status"] == "dead"
    assert row["attempt_count"] == 2
    assert [(a["number"], a["error"]["kind"]) for a in row["attempts"]] == [
        (1, "worker_lost"),
        (2, "worker_lost"),
    ]
    assert row["last_error"].startswith("worker_lost")
    assert await deliver_due(another_dispatcher(h)) == 0  # nothing left to claim


async def test_lease_is_extended_while_an_attempt_is_slow(
    harness: Harness, receiver: Receiver
) -> None:
    h = harness
    sub = await one_due_delivery(h, receiver)
    lease = 3.0  # renewed every second: slack for a loaded machine
    first = another_dispatcher(h, real_clock, lease_seconds=lease, idle_poll_seconds=0.05)
    second = another_dispatcher(h, real_clock, lease_seconds=lease)
    receiver.delays = [3 * lease]  # outlives the lease three times over
    running = asyncio.create_task(first.pipeline.run())
    try:
        await asyncio.wait_for(receiver.arrived.wait(), 10)
        taken = 0
        for _ in range(6):  # the lease would have expired ~3 times without renewal
            await asyncio.sleep(lease / 2)
            taken += (await second.pipeline.pump())[0]
    finally:
        await first.pipeline.stop(grace_seconds=10)
        await running
        await second.pipeline.stop(grace_seconds=10)
    assert taken == 0
    assert len(receiver.requests) == 1
    [row] = await deliveries(h, sub["id"])
    assert row["status"] == "succeeded"
    assert [a["number"] for a in row["attempts"]] == [1]
    assert first.pipeline.dropped == 0


async def test_stop_releases_the_attempts_that_outlive_the_grace(
    harness: Harness, receiver: Receiver
) -> None:
    h = harness
    sub = await one_due_delivery(h, receiver)
    first, second = h.app.container.dispatcher, another_dispatcher(h)
    receiver.delays = [2.0]
    running = asyncio.create_task(first.pipeline.run())
    await asyncio.wait_for(receiver.arrived.wait(), 10)
    await first.pipeline.stop(grace_seconds=0.1)
    await running
    assert first.pipeline.held == 0
    # Released, not left to its lease: due again at once (the clock has not moved).
    assert await deliver_due(second) == 1
    [row] = await deliveries(h, sub["id"])
    assert row["status"] == "succeeded"
    assert [a["number"] for a in row["attempts"]] == [1]  # the cancelled attempt is not counted


@pytest.mark.postgres
async def test_two_replicas_deliver_each_delivery_once(tmp_path: Path) -> None:
    async with fresh_postgres_database("notif_replicas") as url:
        report = await run_two_replicas(url, tmp_path, 300, lease_seconds=3.0)
    assert report.failures_logged == []
    assert report.missing == 0
    assert report.not_terminal == 0
    assert report.by_status == {"succeeded": 300}
    assert report.attempt_count_mismatches == 0
    assert report.attempt_rows == 300
    assert report.slow_answers > 0  # the fault happened
    # A delivery is POSTed again only when a lease was lost, and then its first result was
    # dropped: every redelivery is one dropped completion.
    assert report.duplicate_requests == report.dropped_completions
