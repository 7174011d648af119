"""Idempotency-Key on create: same key + same body -> the same schedule; different body -> 409."""

from __future__ import annotations

import asyncio

import httpx

from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body


async def test_same_key_same_body_returns_same_schedule(client: httpx.AsyncClient) -> None:
    h = {**auth(), "Idempotency-Key": "k-1"}
    first = await client.post("/v1/schedules/", json=schedule_body(), headers=h)
    # Same body with keys in another order is the same request.
    reordered = dict(reversed(list(schedule_body().items())))
    again = await client.post("/v1/schedules/", json=reordered, headers=h)
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["secret"] == first.json()["secret"]
    items = (await client.get("/v1/schedules/", headers=auth())).json()["items"]
    assert len(items) == 1


async def test_same_key_different_body_is_409(client: httpx.AsyncClient) -> None:
    h = {**auth(), "Idempotency-Key": "k-2"}
    assert (await client.post("/v1/schedules/", json=schedule_body(), headers=h)).status_code == 201
    r = await client.post("/v1/schedules/", json=schedule_body(name="other"), headers=h)
    assert r.status_code == 409
    assert r.json()["type"].endswith("/idempotency-conflict")
    assert len((await client.get("/v1/schedules/", headers=auth())).json()["items"]) == 1


async def test_concurrent_twins_create_one_schedule(client: httpx.AsyncClient) -> None:
    h = {**auth(), "Idempotency-Key": "k-race"}
    results = await asyncio.gather(
        *[client.post("/v1/schedules/", json=schedule_body(), headers=h) for _ in range(4)]
    )
    assert {r.status_code for r in results} <= {200, 201}
    assert len({r.json()["id"] for r in results}) == 1
    assert len((await client.get("/v1/schedules/", headers=auth())).json()["items"]) == 1


async def test_without_key_each_post_creates(client: httpx.AsyncClient) -> None:
    for _ in range(2):
        assert (
            await client.post("/v1/schedules/", json=schedule_body(), headers=auth())
        ).status_code == 201
    assert len((await client.get("/v1/schedules/", headers=auth())).json()["items"]) == 2
