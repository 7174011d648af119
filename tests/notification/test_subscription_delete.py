"""Deleting a subscription ends its unfinished deliveries: a delivery replayed (or still
retrying) just before the delete is `dead` with the reason afterwards, never `pending` forever
(the dispatcher claims deliveries of live subscriptions only). A replay racing a delete either
loses (404) or is ended by it. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

from notification.domain.deliveries import SUBSCRIPTION_DELETED_ERROR
from notification.service_layer.ports import DeliveryRecord
from tests.notification.api import deliveries, subscribe
from tests.notification.conftest import Harness, Receiver, token
from tests.notification.dispatch import deliver_due
from tests.notification.events import publish, schedule_event


async def stored(h: Harness, sub_id: str) -> list[DeliveryRecord]:
    """The delivery log as stored (the API answers 404 for a deleted subscription)."""
    return await h.app.container.store.list_deliveries("t1", sub_id, 100, None)


async def _one_delivered(h: Harness, receiver: Receiver) -> tuple[dict[str, Any], dict[str, Any]]:
    sub = await subscribe(h, receiver.url)
    _, raw = schedule_event("t1", "schedule.run.failed")
    await publish(h.bus, "schedule-events", raw)
    assert await h.app.events.run_once() == 1
    assert await deliver_due(h.app.container.dispatcher) == 1
    [row] = await deliveries(h, sub["id"])
    assert row["status"] == "succeeded"
    return sub, row


async def test_a_delivery_replayed_just_before_the_delete_ends_dead_with_the_reason(
    harness: Harness, receiver: Receiver
) -> None:
    h = harness
    sub, row = await _one_delivered(h, receiver)
    base = f"/v1/subscriptions/{sub['id']}"
    replay = await h.client.post(f"{base}/deliveries/{row['id']}/replay", headers=token("t1"))
    assert replay.status_code == 202
    assert replay.json()["status"] == "pending"

    assert (await h.client.delete(base, headers=token("t1"))).status_code == 204

    [after] = await stored(h, sub["id"])
    assert after.status == "dead"
    assert after.last_error == SUBSCRIPTION_DELETED_ERROR
    assert after.finished_at is not None
    assert after.next_attempt_at is None
    assert [a.number for a in after.attempts] == [1]  # the log is kept as it was
    assert await deliver_due(h.app.container.dispatcher) == 0
    assert len(receiver.requests) == 1
    # Replaying a deleted subscription's delivery is a 404, and changes nothing.
    again = await h.client.post(f"{base}/deliveries/{row['id']}/replay", headers=token("t1"))
    assert again.status_code == 404
    assert (await stored(h, sub["id"]))[0].status == "dead"


async def test_retrying_deliveries_end_at_the_delete_and_other_subscriptions_keep_theirs(
    harness: Harness, receiver: Receiver
) -> None:
    h = harness
    doomed = await subscribe(h, receiver.url)
    kept = await subscribe(h, receiver.url + "?kept")  # not a duplicate (409) of `doomed`
    _, raw = schedule_event("t1", "schedule.run.failed")
    await publish(h.bus, "schedule-events", raw)
    await h.app.events.run_once()
    receiver.statuses = [503, 503]
    assert await deliver_due(h.app.container.dispatcher) == 2
    assert {r["status"] for s in (doomed, kept) for r in await deliveries(h, s["id"])} == {
        "retrying"
    }

    assert (
        await h.client.delete(f"/v1/subscriptions/{doomed['id']}", headers=token("t1"))
    ).status_code == 204
    [ended] = await stored(h, doomed["id"])
    [waiting] = await deliveries(h, kept["id"])
    assert (ended.status, ended.last_error) == ("dead", SUBSCRIPTION_DELETED_ERROR)
    assert waiting["status"] == "retrying"
    # A second delete of the same subscription is a 404.
    second = await h.client.delete(f"/v1/subscriptions/{doomed['id']}", headers=token("t1"))
    assert second.status_code == 404


async def test_replays_racing_deletes_never_leave_a_delivery_pending(
    harness: Harness, receiver: Receiver
) -> None:
    h = harness
    subs = [await subscribe(h, f"{receiver.url}?n={i}") for i in range(8)]
    _, raw = schedule_event("t1", "schedule.run.failed")
    await publish(h.bus, "schedule-events", raw)
    assert await h.app.events.run_once() == 1
    while await deliver_due(h.app.container.dispatcher):
        pass
    pairs = [(sub, (await deliveries(h, sub["id"]))[0]) for sub in subs]
    assert {row["status"] for _, row in pairs} == {"succeeded"}
    receiver.requests.clear()

    async def replay(sub_id: str, delivery_id: str) -> int:
        url = f"/v1/subscriptions/{sub_id}/deliveries/{delivery_id}/replay"
        return (await h.client.post(url, headers=token("t1"))).status_code

    async def delete(sub_id: str) -> int:
        return (
            await h.client.delete(f"/v1/subscriptions/{sub_id}", headers=token("t1"))
        ).status_code

    results = await asyncio.gather(
        *(call for sub, row in pairs for call in (replay(sub["id"], row["id"]), delete(sub["id"])))
    )
    assert set(results[1::2]) == {204}  # every delete succeeded
    assert set(results[0::2]) <= {202, 404}  # a replay went first, or found it deleted
    for sub, _ in pairs:
        [row] = await stored(h, sub["id"])
        assert row.status in ("succeeded", "dead"), row  # never pending or retrying
    assert await deliver_due(h.app.container.dispatcher) == 0
    assert receiver.requests == []
