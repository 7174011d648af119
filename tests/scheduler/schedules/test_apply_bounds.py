"""The apply route's bounds: at most 10,000 definitions (a clear 422 beyond), its own body limit
(413 above it, while every other route keeps its smaller one) and its own request deadline (not
cut at the default one). Apps built from the real bootstrap with small limits, so the wiring of
the settings is what is tested."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from scheduler.entrypoints.api.app import app_from_container
from scheduler.service_layer.apply import MAX_APPLY_SCHEDULES
from tests.scheduler.conftest import StepClock, auth
from tests.scheduler.schedules.apply_support import APPLY, state
from tests.scheduler.schedules.conftest import make_container, schedule_body

Client = Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]


def small(i: int) -> dict[str, Any]:
    """An ordinary event definition (no target: the smallest body that is still real)."""
    return {
        "key": f"k{i}",
        "name": f"n{i}",
        "cron": "0 3 * * *",
        "timezone": "UTC",
        "action": "event",
    }


@pytest.fixture
def app_client(database_url: str, clock: StepClock) -> Client:
    @asynccontextmanager
    async def open_client(**settings: object) -> AsyncIterator[httpx.AsyncClient]:
        container = make_container(database_url, clock, default_max_schedules=20_000, **settings)
        app = app_from_container(container)
        try:
            async with LifespanManager(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                    c.container = container  # type: ignore[attr-defined]
                    yield c
        finally:
            await container.aclose()

    return open_client


async def test_more_than_ten_thousand_definitions_is_a_clear_422(app_client: Client) -> None:
    async with app_client() as client:
        before = await state(client.container)  # type: ignore[attr-defined]
        body = {"schedules": [small(i) for i in range(MAX_APPLY_SCHEDULES + 1)]}
        r = await client.post(APPLY, json=body, headers=auth())
        assert r.status_code == 422, r.text[:500]
        assert r.json()["field"] == "schedules"
        assert str(MAX_APPLY_SCHEDULES) in r.json()["detail"]
        assert await state(client.container) == before  # type: ignore[attr-defined]


async def test_the_apply_route_has_its_own_body_limit(app_client: Client) -> None:
    async with app_client(max_request_bytes=8 * 1024, max_apply_request_bytes=64 * 1024) as client:
        body = json.dumps({"schedules": [small(i) for i in range(200)]})
        assert 8 * 1024 < len(body) < 64 * 1024
        headers = {**auth(), "Content-Type": "application/json"}
        # Over the default limit, under the apply route's own: accepted (both slash forms).
        r = await client.post(APPLY, content=body, headers=headers)
        assert r.status_code == 200, r.text[:500]
        assert len(r.json()["created"]) == 200
        r = await client.post(APPLY + "/", content=body, headers=headers)
        assert (r.status_code, r.json()["unchanged"]) == (200, 200)
        # Another route keeps the default limit.
        big = schedule_body(description="d" * 1000, payload={"x": "y" * 9000})
        r = await client.post("/v1/schedules/", json=big, headers=auth())
        assert r.status_code == 413
        assert "8192 bytes" in r.json()["detail"]
        # Over the apply route's own limit: 413 naming it.
        huge = json.dumps({"schedules": [small(i) for i in range(2000)]})
        assert len(huge) > 64 * 1024
        r = await client.post(APPLY, content=huge, headers=headers)
        assert r.status_code == 413
        assert r.json()["detail"] == "request body larger than 65536 bytes"


async def test_the_apply_route_is_not_cut_at_the_default_deadline(app_client: Client) -> None:
    # 1,000 definitions take far longer than 10 ms to check and store, whatever the machine.
    body = {"schedules": [small(i) for i in range(1000)]}
    tiny = {"http_request_timeout_seconds": 0.01}
    async with app_client(**tiny, http_apply_timeout_seconds=0.01) as client:
        cut = await client.post(APPLY, json=body, headers=auth())
        assert cut.status_code == 503, cut.text[:500]
        assert "0.01 s" in cut.json()["detail"]
    async with app_client(**tiny) as client:  # the default apply deadline: 120 s
        r = await client.post(APPLY, json=body, headers=auth())
        assert r.status_code == 200, r.text[:500]
        assert len(r.json()["created"]) == 1000
