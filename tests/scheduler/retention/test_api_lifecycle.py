"""Retention through the real API and bootstrap (SQLite and PostgreSQL): an Idempotency-Key
replay after the TTL creates a new schedule, and a deleted schedule is purged only once its
history has aged out. Time moves by the injected clock."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from asgi_lifespan import LifespanManager

from scheduler.adapters.db.tables import idempotency_keys, schedules
from scheduler.bootstrap import Container, retention_policy
from scheduler.entrypoints.api.app import app_from_container
from scheduler.service_layer.retention import RetentionReport, prune_once
from tests.scheduler.conftest import StepClock, auth
from tests.scheduler.retention.conftest import add_runs, ids_of
from tests.scheduler.schedules.conftest import make_container, schedule_body


@pytest.fixture
async def container(database_url: str, clock: StepClock) -> AsyncIterator[Container]:
    c = make_container(database_url, clock)
    yield c
    await c.aclose()


@pytest.fixture
async def client(container: Container) -> AsyncIterator[httpx.AsyncClient]:
    app = app_from_container(container)
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://scheduler.test") as c:
            yield c


async def prune(container: Container) -> RetentionReport:
    return await prune_once(
        container.uow_factory, retention_policy(container.settings), container.clock()
    )


async def test_replay_within_the_ttl_returns_the_schedule_after_it_creates_a_new_one(
    container: Container, client: httpx.AsyncClient, clock: StepClock
) -> None:
    h = {**auth(), "Idempotency-Key": "nightly-1"}
    first = await client.post("/v1/schedules/", json=schedule_body(), headers=h)
    assert first.status_code == 201

    clock.advance(hours=23)  # inside the 24 h TTL: pruning keeps the key, a replay replays
    await prune(container)
    again = await client.post("/v1/schedules/", json=schedule_body(), headers=h)
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]

    clock.advance(hours=2)  # past the TTL: the key is pruned, the same request is new again
    report = await prune(container)
    assert sum(report.deleted.values()) == 1
    late = await client.post("/v1/schedules/", json=schedule_body(), headers=h)
    assert late.status_code == 201
    assert late.json()["id"] != first.json()["id"]
    listed = (await client.get("/v1/schedules/", headers=auth())).json()["items"]
    assert len(listed) == 2


async def test_deleted_schedule_row_is_purged_after_the_run_retention(
    container: Container, client: httpx.AsyncClient, clock: StepClock
) -> None:
    h = {**auth(), "Idempotency-Key": "to-delete"}
    created = (await client.post("/v1/schedules/", json=schedule_body(), headers=h)).json()
    sid = created["id"]
    await add_runs(container.engine, sid, 2, status="succeeded", finished_at=clock(), prefix="r")
    assert (await client.delete(f"/v1/schedules/{sid}", headers=auth())).status_code == 204

    clock.advance(days=89)  # history is kept until retention: the row stays for its runs
    await prune(container)
    assert sid in await ids_of(container.engine, schedules.c.id)

    clock.advance(days=2)
    await prune(container)  # runs first, then the schedule that has none left, with its key
    assert sid not in await ids_of(container.engine, schedules.c.id)
    assert await ids_of(container.engine, idempotency_keys.c.key) == set()
    assert (await client.get(f"/v1/schedules/{sid}", headers=auth())).status_code == 404
