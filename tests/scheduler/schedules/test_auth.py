"""Auth at the API edge: 401 with WWW-Authenticate, 403 for a missing scope; health, metrics and
OpenAPI need no token."""

from __future__ import annotations

import httpx

from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body


async def test_missing_token_is_401_problem(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/schedules/")
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert r.headers["content-type"] == "application/problem+json"


async def test_bad_token_is_401(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/schedules/", headers={"Authorization": "Bearer not.a.jwt"})
    assert r.status_code == 401
    assert 'error="invalid_token"' in r.headers["www-authenticate"]


async def test_read_scope_cannot_write(client: httpx.AsyncClient) -> None:
    ro = auth("tenant-a", ("schedules:read",))
    assert (await client.get("/v1/schedules/", headers=ro)).status_code == 200
    r = await client.post("/v1/schedules/", json=schedule_body(), headers=ro)
    assert r.status_code == 403
    assert r.headers["content-type"] == "application/problem+json"
    assert (await client.get("/v1/schedules/", headers=ro)).json()["items"] == []


async def test_write_scope_alone_cannot_read(client: httpx.AsyncClient) -> None:
    wo = auth("tenant-a", ("schedules:write",))
    assert (await client.get("/v1/schedules/", headers=wo)).status_code == 403


async def test_operational_endpoints_need_no_token(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json() == {"status": "ready"}
    spec = (await client.get("/openapi.json")).json()
    assert "/v1/schedules/" in spec["paths"]
    await client.get("/v1/schedules/", headers=auth())
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    # Route templates label the metrics, never raw ids.
    assert 'route="/v1/schedules/"' in metrics.text
    assert "scheduler_http_requests_total" in metrics.text
