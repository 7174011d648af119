"""Endpoint health: an endpoint failing continuously for 5 days (and at least 3 attempts) is
disabled and the tenant alerted in-app and by email; a success resets the streak."""

from __future__ import annotations

import email
import email.policy
from datetime import UTC, datetime, timedelta
from typing import Any

from notification.domain.deliveries import (
    EndpointHealth,
    EndpointHealthPolicy,
    StreakChange,
    streak_changes,
)
from tests.notification.api import subscribe
from tests.notification.conftest import Harness, Receiver, token
from tests.notification.dispatch import deliver_due
from tests.notification.events import publish, schedule_event
from tests.notification.smtp import send_due


async def deliver_one(h: Harness, event_type: str = "schedule.run.failed") -> None:
    _, raw = schedule_event("t1", event_type)
    await publish(h.bus, "schedule-events", raw)
    await h.app.events.run_once()
    assert await deliver_due(h.app.container.dispatcher) == 1


async def sub_state(h: Harness, sub_id: str) -> dict[str, Any]:
    resp = await h.client.get(f"/v1/subscriptions/{sub_id}", headers=token("t1"))
    return resp.json()  # type: ignore[no-any-return]


async def test_five_days_of_failure_disables_and_alerts(
    make_harness: Any, db_url: str, receiver: Receiver
) -> None:
    # One attempt per delivery, so every delivery is a dead letter at once.
    h: Harness = await make_harness(db_url, retry_max_attempts=1)
    await h.client.put(
        "/v1/alert-contacts", json={"emails": ["ops@example.com"]}, headers=token("t1")
    )
    sub = await subscribe(h, receiver.url, description="billing hook")
    receiver.statuses = [500] * 10

    await deliver_one(h)  # failing since day 0
    h.clock.advance(days=3)
    await deliver_one(h)
    h.clock.advance(days=2, seconds=-1)
    await deliver_one(h)  # 3 failures, but 1 s short of 5 days
    assert (await sub_state(h, sub["id"]))["enabled"] is True
    h.clock.advance(seconds=1)
    await deliver_one(h)  # 5 days of continuous failure
    state = await sub_state(h, sub["id"])
    assert state["enabled"] is False
    assert state["disabled_reason"] == "endpoint_failing"

    # A disabled endpoint receives nothing more; its deliveries wait for re-enabling.
    before = len(receiver.requests)
    _, raw = schedule_event("t1", "schedule.run.failed")
    await publish(h.bus, "schedule-events", raw)
    await h.app.events.run_once()
    assert await deliver_due(h.app.container.dispatcher) == 0
    assert len(receiver.requests) == before

    inbox = (await h.client.get("/v1/notifications/", headers=token("t1"))).json()["items"]
    assert [n["template"] for n in inbox] == ["endpoint_disabled"]
    assert receiver.url in inbox[0]["title"]
    assert await send_due(h.app.container.emails) == 1
    [eml] = list((h.settings.var_dir / "mail").glob("*.eml"))
    parsed = email.message_from_bytes(eml.read_bytes(), policy=email.policy.default)
    assert "disabled" in parsed["Subject"]
    assert parsed["To"] == "ops@example.com"


async def test_a_success_resets_the_streak(
    make_harness: Any, sqlite_url: str, receiver: Receiver
) -> None:
    h: Harness = await make_harness(sqlite_url, retry_max_attempts=1)
    sub = await subscribe(h, receiver.url)
    receiver.statuses = [500, 500, 200, 500, 500, 500]
    await deliver_one(h)
    h.clock.advance(days=2)
    await deliver_one(h)
    await deliver_one(h)  # success: streak cleared
    h.clock.advance(days=3, seconds=1)  # 5 days after the first failure
    await deliver_one(h)
    await deliver_one(h)
    await deliver_one(h)
    assert (await sub_state(h, sub["id"]))["enabled"] is True
    assert (await h.client.get("/v1/notifications/", headers=token("t1"))).json()["items"] == []


async def test_reenabling_restarts_the_streak(
    make_harness: Any, sqlite_url: str, receiver: Receiver
) -> None:
    h: Harness = await make_harness(
        sqlite_url, retry_max_attempts=1, endpoint_disable_min_failures=1
    )
    sub = await subscribe(h, receiver.url)
    receiver.statuses = [500] * 5
    await deliver_one(h)
    h.clock.advance(days=5)
    await deliver_one(h)
    assert (await sub_state(h, sub["id"]))["enabled"] is False
    resp = await h.client.patch(
        f"/v1/subscriptions/{sub['id']}", json={"enabled": True}, headers=token("t1")
    )
    assert resp.json()["enabled"] is True
    assert resp.json()["disabled_reason"] is None
    # The streak starts again: one failure right after re-enabling does not re-disable.
    receiver.statuses = [500]
    await deliver_one(h)
    assert (await sub_state(h, sub["id"]))["enabled"] is True


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_endpoint_health_rule() -> None:
    policy = EndpointHealthPolicy(disable_after_seconds=5 * 86400, min_consecutive_failures=3)
    [two] = streak_changes([("s", False, T0 + timedelta(days=1)), ("s", False, T0)])
    h = two.applied_to(EndpointHealth(None, 0))
    assert h == EndpointHealth(T0, 2)
    assert not policy.should_disable(
        h.failing_since, h.consecutive_failures, T0 + timedelta(days=9)
    )
    [one] = streak_changes([("s", False, T0 + timedelta(days=2))])
    h = one.applied_to(h)
    assert h == EndpointHealth(T0, 3)  # adds to the streak it found
    assert not policy.should_disable(
        h.failing_since, 3, T0 + timedelta(days=5) - timedelta(seconds=1)
    )
    assert policy.should_disable(h.failing_since, 3, T0 + timedelta(days=5))
    [ok] = streak_changes([("s", True, T0 + timedelta(days=3))])
    assert ok.clears
    assert ok.applied_to(h) == EndpointHealth(None, 0)


def test_streak_change_counts_from_the_last_success_in_start_order() -> None:
    t = [T0 + timedelta(seconds=i) for i in range(4)]
    changes = streak_changes(
        [("a", False, t[3]), ("a", True, t[1]), ("a", False, t[0]), ("a", False, t[2])]
    )
    assert changes == [StreakChange("a", 2, t[2], True)]
    prior = EndpointHealth(T0 - timedelta(days=9), 40)
    assert changes[0].applied_to(prior) == EndpointHealth(t[2], 2)
    assert not changes[0].clears


async def test_a_failing_alert_leaves_the_written_attempts_alone(
    make_harness: Any, sqlite_url: str, receiver: Receiver
) -> None:
    """The health rule runs once the attempts are written: an outage on the alert path is logged
    and the batch stays written once (a retry of it would find its own leases gone)."""
    h: Harness = await make_harness(sqlite_url, retry_max_attempts=1)
    sub = await subscribe(h, receiver.url)
    receiver.statuses = [500] * 10
    dispatcher = h.app.container.dispatcher
    for _ in range(2):
        await deliver_one(h)
        h.clock.advance(days=3)

    async def alert_path_down(_sub: object) -> None:
        raise ConnectionError("alert path unreachable")

    dispatcher.on_endpoint_disabled = alert_path_down
    await deliver_one(h)  # the third failure in 6 days: disabled; its alert fails
    assert (dispatcher.pipeline.written, dispatcher.pipeline.dropped) == (3, 0)
    state = await sub_state(h, sub["id"])
    assert (state["enabled"], state["disabled_reason"]) == (False, "endpoint_failing")
