"""Subscriptions per tenant are bounded (SQLite and PostgreSQL, over HTTP): past
NOTIFICATION_MAX_SUBSCRIPTIONS_PER_TENANT live subscriptions (100 by default, disabled ones
count) a create answers 403 `…/quota-exceeded` naming the limit, its value and the count the
request would reach; concurrent creates cannot overrun it; and an exact duplicate (same url,
same set of filters) answers 409 naming the existing subscription."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.notification.api import UNREACHABLE_URL, subscribe
from tests.notification.conftest import Harness, token

PROBLEM = "application/problem+json"
WAIT_SECONDS = 60.0  # generous: two shared cores


async def _create(h: Harness, url: str, event_types: list[str], tenant: str = "t1") -> Any:
    return await h.client.post(
        "/v1/subscriptions/",
        json={"url": url, "event_types": event_types},
        headers=token(tenant),
    )


async def test_the_101st_subscription_is_refused_naming_the_limit(harness: Harness) -> None:
    for i in range(100):
        await subscribe(harness, url=f"{UNREACHABLE_URL}/{i}")
    refused = await _create(harness, f"{UNREACHABLE_URL}/100", ["schedule.*"])
    assert refused.status_code == 403, refused.text
    assert refused.headers["content-type"].startswith(PROBLEM)
    body = refused.json()
    assert body["type"].endswith("/quota-exceeded")
    assert (body["limit"], body["limit_value"], body["current"]) == (
        "max_subscriptions_per_tenant",
        100,
        101,
    )
    assert "max_subscriptions_per_tenant" in body["detail"]
    # Another tenant has its own count; deleting one makes room again.
    await subscribe(harness, url=f"{UNREACHABLE_URL}/100", tenant="t2")
    listed = await harness.client.get("/v1/subscriptions/?limit=1", headers=token("t1"))
    first = listed.json()["items"][0]["id"]
    gone = await harness.client.delete(f"/v1/subscriptions/{first}", headers=token("t1"))
    assert gone.status_code == 204
    await subscribe(harness, url=f"{UNREACHABLE_URL}/100")


async def test_the_limit_is_a_setting_and_disabled_subscriptions_count(
    make_harness: Callable[..., Any], db_url: str
) -> None:
    h: Harness = await make_harness(db_url, max_subscriptions_per_tenant=3)
    for i in range(3):
        await subscribe(h, url=f"{UNREACHABLE_URL}/{i}", enabled=False)
    refused = await _create(h, f"{UNREACHABLE_URL}/3", ["schedule.*"])
    assert refused.status_code == 403, refused.text
    assert (refused.json()["limit_value"], refused.json()["current"]) == (3, 4)


async def test_concurrent_creates_never_overrun_the_limit(
    make_harness: Callable[..., Any], db_url: str
) -> None:
    h: Harness = await make_harness(db_url, max_subscriptions_per_tenant=5)
    answers = await asyncio.wait_for(
        asyncio.gather(*(_create(h, f"{UNREACHABLE_URL}/{i}", ["schedule.*"]) for i in range(20))),
        WAIT_SECONDS,
    )
    assert sorted(a.status_code for a in answers) == [201] * 5 + [403] * 15
    listed = await h.client.get("/v1/subscriptions/", headers=token("t1"))
    assert len(listed.json()["items"]) == 5


async def test_an_exact_duplicate_is_409_naming_the_existing_one(harness: Harness) -> None:
    first = await subscribe(harness, event_types=["schedule.*", "schedule.run.failed"])
    # The same filters in another order (and repeated) are the same subscription.
    again = await _create(
        harness, UNREACHABLE_URL, ["schedule.run.failed", "schedule.*", "schedule.*"]
    )
    assert again.status_code == 409, again.text
    assert again.headers["content-type"].startswith(PROBLEM)
    assert again.json()["type"].endswith("/duplicate-subscription")
    assert again.json()["existing_id"] == first["id"]
    # Other filters, another url or another tenant are other subscriptions.
    assert (await _create(harness, UNREACHABLE_URL, ["schedule.*"])).status_code == 201
    assert (await _create(harness, UNREACHABLE_URL + "2", ["schedule.*"])).status_code == 201
    other = await _create(harness, UNREACHABLE_URL, ["schedule.*"], tenant="t2")
    assert other.status_code == 201
    # Once deleted, the same subscription may be created again.
    await harness.client.delete(f"/v1/subscriptions/{first['id']}", headers=token("t1"))
    recreated = await _create(harness, UNREACHABLE_URL, ["schedule.*", "schedule.run.failed"])
    assert recreated.status_code == 201, recreated.text
