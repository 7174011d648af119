"""Subscription URLs name only ports the egress NetworkPolicy opens (80, 443) unless
WEBHOOK_ALLOWED_PORTS says otherwise: a 422 naming `url` on create and on PATCH, ssrf_blocked at
send time."""

from __future__ import annotations

from typing import Any

from tests.notification.api import deliveries, subscribe
from tests.notification.conftest import Harness, Receiver, token
from tests.notification.dispatch import deliver_due
from tests.notification.events import publish, schedule_event


async def test_create_and_patch_refuse_a_port_outside_the_allow_list(
    make_harness: Any, sqlite_url: str
) -> None:
    h = await make_harness(sqlite_url, webhook_allow_private_networks=False)
    body = {"url": "https://hooks.example.com:8443/h", "event_types": ["schedule.*"]}
    refused = await h.client.post("/v1/subscriptions/", json=body, headers=token("t1"))
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "url"
    assert "port 8443 is not allowed" in refused.json()["detail"]
    body["url"] = "https://hooks.example.com/h"
    created = await h.client.post("/v1/subscriptions/", json=body, headers=token("t1"))
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    patched = await h.client.patch(
        f"/v1/subscriptions/{sid}",
        json={"url": "http://hooks.example.com:8080/h"},
        headers=token("t1"),
    )
    assert patched.status_code == 422, patched.text
    assert patched.json()["field"] == "url"
    got = await h.client.get(f"/v1/subscriptions/{sid}", headers=token("t1"))
    assert got.json()["url"] == "https://hooks.example.com/h"


async def test_a_configured_allow_list_applies(make_harness: Any, sqlite_url: str) -> None:
    h = await make_harness(
        sqlite_url,
        webhook_allow_private_networks=False,
        webhook_allowed_ports=frozenset({8443}),
    )
    ok = {"url": "https://hooks.example.com:8443/h", "event_types": ["schedule.*"]}
    assert (
        await h.client.post("/v1/subscriptions/", json=ok, headers=token("t1"))
    ).status_code == 201
    web = {"url": "https://hooks.example.com/h", "event_types": ["schedule.*"]}
    r = await h.client.post("/v1/subscriptions/", json=web, headers=token("t1"))
    assert r.status_code == 422, r.text


async def test_a_saved_url_on_a_port_no_longer_allowed_is_refused_at_send_time(
    make_harness: Any, sqlite_url: str, receiver: Receiver
) -> None:
    # Saved while any port was allowed (private networks, the receiver's random port) ...
    before = await make_harness(sqlite_url)
    sub = await subscribe(before, receiver.url)
    # ... delivered by a process whose allow-list has since tightened: no request leaves.
    after: Harness = await make_harness(
        sqlite_url,
        webhook_allowed_ports=frozenset({443}),
        secret_key=before.settings.secret_key,
    )
    _, raw = schedule_event("t1", "schedule.run.failed")
    await publish(after.bus, "schedule-events", raw)
    await after.app.events.run_once()
    assert await deliver_due(after.app.container.dispatcher) == 1
    assert receiver.requests == []
    [delivery] = await deliveries(after, sub["id"])
    assert delivery["status"] == "dead", delivery  # not retried: the rule will not heal
    assert [a["error"]["kind"] for a in delivery["attempts"]] == ["ssrf_blocked"]
    assert "is not allowed (allowed: 443)" in delivery["attempts"][0]["error"]["message"]
