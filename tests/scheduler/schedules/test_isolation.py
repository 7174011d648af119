"""Tenant isolation: every route answers 404 for another tenant's schedule (never 403), and
lists never show it."""

from __future__ import annotations

import httpx
import pytest

from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body

ROUTES = [
    ("GET", ""),
    ("PATCH", ""),
    ("DELETE", ""),
    ("POST", "/pause"),
    ("POST", "/resume"),
    ("POST", "/secret/rotate"),
    ("GET", "/occurrences"),
]


@pytest.mark.parametrize(("method", "suffix"), ROUTES)
async def test_other_tenant_gets_404(client: httpx.AsyncClient, method: str, suffix: str) -> None:
    r = await client.post("/v1/schedules/", json=schedule_body(), headers=auth("tenant-a"))
    sid = r.json()["id"]
    kwargs = {"json": {"name": "stolen"}} if method == "PATCH" else {}
    other = await client.request(
        method, f"/v1/schedules/{sid}{suffix}", headers=auth("tenant-b"), **kwargs
    )
    assert other.status_code == 404, other.text
    assert other.headers["content-type"] == "application/problem+json"
    missing = await client.request(
        method, f"/v1/schedules/sch_doesnotexist{suffix}", headers=auth("tenant-b"), **kwargs
    )
    # Another tenant's schedule and a missing one are indistinguishable (same status and type).
    assert missing.status_code == 404
    assert missing.json()["type"] == other.json()["type"]
    # And the owner still sees it unchanged.
    mine = await client.get(f"/v1/schedules/{sid}", headers=auth("tenant-a"))
    assert mine.status_code == 200
    assert mine.json()["name"] == "nightly-report"
    assert mine.json()["version"] == 1


async def test_lists_are_per_tenant(client: httpx.AsyncClient) -> None:
    a = await client.post("/v1/schedules/", json=schedule_body(name="a"), headers=auth("tenant-a"))
    b = await client.post("/v1/schedules/", json=schedule_body(name="b"), headers=auth("tenant-b"))
    la = (await client.get("/v1/schedules/", headers=auth("tenant-a"))).json()["items"]
    lb = (await client.get("/v1/schedules/", headers=auth("tenant-b"))).json()["items"]
    assert [i["id"] for i in la] == [a.json()["id"]]
    assert [i["id"] for i in lb] == [b.json()["id"]]


async def test_idempotency_keys_are_per_tenant(client: httpx.AsyncClient) -> None:
    h = {"Idempotency-Key": "same-key"}
    a = await client.post("/v1/schedules/", json=schedule_body(), headers={**auth("tenant-a"), **h})
    b = await client.post("/v1/schedules/", json=schedule_body(), headers={**auth("tenant-b"), **h})
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] != b.json()["id"]
