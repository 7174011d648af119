"""Fan-out end to end: events on the in-process bus -> webhook_deliveries -> signed POSTs to a
real aiohttp receiver on 127.0.0.1, with retries, dead letters, replay and rotation."""

from __future__ import annotations

import asyncio
from typing import Any

import webhookdeliver
from notification.domain.subscriptions import delivery_id
from tests.notification.api import deliveries, subscribe
from tests.notification.conftest import Harness, Receiver, token
from tests.notification.dispatch import deliver_due
from tests.notification.events import publish, schedule_event


async def test_matching_event_is_delivered_signed(harness: Harness, receiver: Receiver) -> None:
    h = harness
    sub = await subscribe(h, receiver.url)
    failed_only = await subscribe(h, receiver.url, event_types=["schedule.run.failed"])
    other_tenant = await subscribe(h, receiver.url, tenant="t2")
    # Another url (the same path): an exact duplicate of `sub` is refused (409).
    disabled = await subscribe(h, receiver.url + "?disabled", enabled=False)
    event_id, raw = schedule_event("t1", "schedule.run.succeeded", run="r1")
    await publish(h.bus, "schedule-events", raw)

    assert await h.app.events.run_once() == 1
    assert await deliver_due(h.app.container.dispatcher) == 1
    assert len(receiver.requests) == 1
    headers, body = receiver.requests[0]
    assert body == raw  # the delivery body is the envelope as consumed
    assert headers["X-Webhook-Id"] == delivery_id(event_id, sub["id"])
    assert headers["X-Event-Type"] == "schedule.run.succeeded"
    assert webhookdeliver.verify([sub["secret"]], headers, body)
    assert not webhookdeliver.verify([other_tenant["secret"]], headers, body)
    [row] = await deliveries(h, sub["id"])
    assert row["status"] == "succeeded"
    assert row["event_id"] == event_id
    assert [a["status_code"] for a in row["attempts"]] == [200]
    for other in (failed_only, disabled):
        assert await deliveries(h, other["id"]) == []
    assert await deliveries(h, other_tenant["id"], tenant="t2") == []


async def test_reread_after_crash_creates_no_duplicate(harness: Harness) -> None:
    h = harness
    sub = await subscribe(h)
    event_id, raw = schedule_event("t1", "schedule.paused")
    # The same record handled twice (a consumer that died before committing re-reads it).
    from notification.service_layer.fanout import IncomingEvent

    event = IncomingEvent(event_id, "schedule.paused", "t1", raw)
    assert await h.app.container.fanout.handle([event]) == 1
    assert await h.app.container.fanout.handle([event]) == 0
    assert len(await deliveries(h, sub["id"])) == 1


async def test_retry_dead_letter_and_replay(
    make_harness: Any, sqlite_url: str, receiver: Receiver
) -> None:
    h: Harness = await make_harness(sqlite_url, retry_max_attempts=2, retry_max_seconds=60.0)
    sub = await subscribe(h, receiver.url)
    _, raw = schedule_event("t1", "schedule.run.failed")
    await publish(h.bus, "schedule-events", raw)
    await h.app.events.run_once()
    receiver.statuses = [503, 500, 200]
    dispatcher = h.app.container.dispatcher

    assert await deliver_due(dispatcher) == 1
    [row] = await deliveries(h, sub["id"])
    assert row["status"] == "retrying"
    assert row["next_attempt_at"] is not None
    assert await deliver_due(dispatcher) == 0  # not due yet
    h.clock.advance(seconds=61)
    assert await deliver_due(dispatcher) == 1
    [row] = await deliveries(h, sub["id"])
    assert row["status"] == "dead"  # max_attempts=2 exhausted: dead letter
    assert [a["status_code"] for a in row["attempts"]] == [503, 500]
    assert row["attempts"][0]["error"]["kind"] == "http_status"

    replay = await h.client.post(
        f"/v1/subscriptions/{sub['id']}/deliveries/{row['id']}/replay", headers=token("t1")
    )
    assert replay.status_code == 202
    assert replay.json()["status"] == "pending"
    assert await deliver_due(dispatcher) == 1
    [row] = await deliveries(h, sub["id"])
    assert row["status"] == "succeeded"
    assert [a["number"] for a in row["attempts"]] == [1, 2, 3]
    # Every attempt, replay included, carries the same idempotency key.
    assert {hdrs["X-Webhook-Id"] for hdrs, _ in receiver.requests} == {row["id"]}
    assert [hdrs["X-Attempt"] for hdrs, _ in receiver.requests] == ["1", "2", "3"]


async def test_non_retryable_status_dead_letters_at_once(
    harness: Harness, receiver: Receiver
) -> None:
    sub = await subscribe(harness, receiver.url)
    _, raw = schedule_event("t1", "schedule.created")
    await publish(harness.bus, "schedule-events", raw)
    await harness.app.events.run_once()
    receiver.statuses = [410]
    await deliver_due(harness.app.container.dispatcher)
    [row] = await deliveries(harness, sub["id"])
    assert row["status"] == "dead"
    assert row["attempt_count"] == 1


async def test_rotation_signs_with_both_secrets_during_grace(
    harness: Harness, receiver: Receiver
) -> None:
    sub = await subscribe(harness, receiver.url)
    rotated = (
        await harness.client.post(
            f"/v1/subscriptions/{sub['id']}/secret/rotate", headers=token("t1")
        )
    ).json()
    _, raw = schedule_event("t1", "schedule.updated")
    await publish(harness.bus, "schedule-events", raw)
    await harness.app.events.run_once()
    await deliver_due(harness.app.container.dispatcher)
    headers, body = receiver.requests[0]
    assert headers["X-Signature"].count("sha256=") == 2
    assert webhookdeliver.verify([rotated["secret"]], headers, body)
    assert webhookdeliver.verify([sub["secret"]], headers, body)  # receivers not yet updated


async def test_running_service_delivers_without_manual_steps(
    make_harness: Any, sqlite_url: str, receiver: Receiver
) -> None:
    h: Harness = await make_harness(sqlite_url, run_workers=True)
    sub = await subscribe(h, receiver.url)
    _, raw = schedule_event("t1", "schedule.triggered", report="daily")
    await publish(h.bus, "schedule-events", raw)
    await asyncio.wait_for(receiver.arrived.wait(), timeout=10)
    assert webhookdeliver.verify([sub["secret"]], *receiver.requests[0])


async def test_malformed_event_is_skipped_and_committed(harness: Harness) -> None:
    sub = await subscribe(harness)
    _, good = schedule_event("t1", "schedule.resumed")
    await publish(harness.bus, "schedule-events", b"not json", b'{"id": "x"}', good)
    assert await harness.app.events.run_once() == 3
    assert len(await deliveries(harness, sub["id"])) == 1
    assert await harness.app.events.run_once() == 0  # committed: nothing is re-read
