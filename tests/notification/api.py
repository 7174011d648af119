"""HTTP helpers shared by the notification tests: create a subscription, read its deliveries."""

from __future__ import annotations

from typing import Any

from tests.notification.conftest import Harness, token

# Port 9 (discard) on loopback: nothing listens, so a delivery to it fails with a connect error.
UNREACHABLE_URL = "http://127.0.0.1:9/hook"


async def subscribe(
    h: Harness, url: str = UNREACHABLE_URL, tenant: str = "t1", **body: Any
) -> dict[str, Any]:
    payload = {"url": url, "event_types": ["schedule.*"], **body}
    resp = await h.client.post("/v1/subscriptions/", json=payload, headers=token(tenant))
    assert resp.status_code == 201, resp.text
    return resp.json()  # type: ignore[no-any-return]


async def deliveries(h: Harness, sub_id: str, tenant: str = "t1") -> list[dict[str, Any]]:
    resp = await h.client.get(f"/v1/subscriptions/{sub_id}/deliveries", headers=token(tenant))
    assert resp.status_code == 200
    return resp.json()["items"]  # type: ignore[no-any-return]
