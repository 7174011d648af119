"""Labels and key (DESIGN.md §7b): validation, 409 key-conflict (a deleted schedule's key is free
again), the `?label=` and `?key=` filters, `PUT /v1/schedules/by-key/{key}` (201, 200 updated,
200 unchanged with no write at all) and a tenant-supplied secret (stored, never returned)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from scheduler.bootstrap import Container
from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body

SUPPLIED = "whsec_" + base64.b64encode(b"s" * 32).decode()


async def _create(client: httpx.AsyncClient, **fields: Any) -> httpx.Response:
    return await client.post("/v1/schedules/", json=schedule_body(**fields), headers=auth())


async def _names(client: httpx.AsyncClient, query: str) -> list[str]:
    r = await client.get(f"/v1/schedules/?{query}", headers=auth())
    assert r.status_code == 200, r.text
    return sorted(item["name"] for item in r.json()["items"])


async def _outbox_count(container: Container) -> int:
    async with container.engine.connect() as conn:
        return int((await conn.execute(sa.text("SELECT count(*) FROM outbox"))).scalar_one())


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"labels": {"Team": "x"}}, "labels"),
        ({"labels": {"team-": "x"}}, "labels"),
        ({"labels": {"team": "a b"}}, "labels"),
        ({"labels": {"team": "v" * 64}}, "labels"),
        ({"labels": {f"k{i}": "v" for i in range(33)}}, "labels"),
        ({"key": "-starts-with-dash"}, "key"),
        ({"key": "k" * 129}, "key"),
        ({"key": "has space"}, "key"),
        ({"secret": "whsec_" + base64.b64encode(b"s" * 23).decode()}, "secret"),
        ({"secret": "whsec_" + base64.b64encode(b"s" * 65).decode()}, "secret"),
        ({"secret": "whsec_not*base64"}, "secret"),
        ({"secret": base64.b64encode(b"s" * 32).decode()}, "secret"),
    ],
)
async def test_invalid_labels_key_and_secret_are_422_naming_the_field(
    client: httpx.AsyncClient, fields: dict[str, Any], where: str
) -> None:
    r = await _create(client, **fields)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert where in r.text
    if where == "secret":  # a refused secret is not echoed back
        assert fields["secret"] not in r.text


async def test_32_labels_and_the_longest_key_are_accepted(client: httpx.AsyncClient) -> None:
    labels = {f"k{i}.example.com/x": "V." + "v" * 61 for i in range(32)}
    key = "A" + "b:/._-" * 21 + "c"
    r = await _create(client, labels=labels, key=key)
    assert r.status_code == 201, r.text
    assert r.json()["labels"] == labels
    assert r.json()["key"] == key


async def test_a_secret_on_an_event_schedule_is_422(client: httpx.AsyncClient) -> None:
    r = await _create(client, action="event", target=None, secret=SUPPLIED)
    assert r.status_code == 422
    assert "secret" in r.text


async def test_a_live_key_conflicts_and_a_deleted_ones_is_free(client: httpx.AsyncClient) -> None:
    first = await _create(client, key="billing/nightly")
    assert first.status_code == 201
    again = await _create(client, key="billing/nightly")
    assert again.status_code == 409
    assert again.json()["type"].endswith("/key-conflict")
    # Another tenant's key space is its own.
    other = await client.post(
        "/v1/schedules/", json=schedule_body(key="billing/nightly"), headers=auth("tenant-b")
    )
    assert other.status_code == 201
    deleted = await client.delete(f"/v1/schedules/{first.json()['id']}", headers=auth())
    assert deleted.status_code == 204
    assert (await _create(client, key="billing/nightly")).status_code == 201


async def test_label_filters_equality_presence_and_all_must_hold(
    client: httpx.AsyncClient,
) -> None:
    await _create(client, name="a", labels={"team": "billing", "env": "prod"})
    await _create(client, name="b", labels={"team": "billing"})
    await _create(client, name="c", labels={"team": "search", "env": "dev"})
    await _create(client, name="d")
    await client.post(
        "/v1/schedules/",
        json=schedule_body(name="x", labels={"team": "billing"}),
        headers=auth("tenant-b"),
    )
    assert await _names(client, "label=team=billing") == ["a", "b"]
    assert await _names(client, "label=env") == ["a", "c"]
    assert await _names(client, "label=team=billing&label=env") == ["a"]
    assert await _names(client, "label=team=billing&label=env=dev") == []
    assert await _names(client, "label=nothing") == []
    assert await _names(client, "label=team=") == []
    bad = await client.get("/v1/schedules/?label=Bad", headers=auth())
    assert bad.status_code == 422
    assert "label" in bad.text


async def test_key_filter_finds_one(client: httpx.AsyncClient) -> None:
    await _create(client, name="a", key="k-a")
    await _create(client, name="b", key="k-b")
    assert await _names(client, "key=k-b") == ["b"]
    assert await _names(client, "key=k-none") == []


async def test_put_by_key_creates_updates_and_writes_nothing_when_unchanged(
    client: httpx.AsyncClient, container: Container, clock: Any
) -> None:
    body = schedule_body(labels={"team": "billing"})
    created = await client.put("/v1/schedules/by-key/billing/nightly", json=body, headers=auth())
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    assert created.headers["Location"] == f"/v1/schedules/{sid}"
    assert created.json()["key"] == "billing/nightly"
    assert created.json()["secret"].startswith("whsec_")  # generated: shown once
    assert created.json()["version"] == 1

    events = await _outbox_count(container)
    same = await client.put("/v1/schedules/by-key/billing/nightly", json=body, headers=auth())
    assert same.status_code == 200
    assert same.json()["version"] == 1
    assert same.json()["updated_at"] == created.json()["updated_at"]
    assert same.json()["secret"] is None
    assert await _outbox_count(container) == events

    changed = {**body, "labels": {"team": "billing", "env": "prod"}, "cron": "0 4 * * *"}
    updated = await client.put("/v1/schedules/by-key/billing/nightly", json=changed, headers=auth())
    assert updated.status_code == 200, updated.text
    assert updated.json()["id"] == sid
    assert updated.json()["version"] == 2
    assert updated.json()["labels"] == {"team": "billing", "env": "prod"}
    assert updated.json()["secret"] is None
    async with container.engine.connect() as conn:
        payload = (
            await conn.execute(sa.text("SELECT payload FROM outbox ORDER BY id DESC LIMIT 1"))
        ).scalar_one()
    assert '"changed":["cron","labels"]' in payload.replace(" ", "")

    mismatch = await client.put(
        "/v1/schedules/by-key/billing/nightly", json={**body, "key": "other"}, headers=auth()
    )
    assert mismatch.status_code == 422
    assert "key" in mismatch.text


async def test_supplied_secret_is_stored_never_returned_and_put_replaces_it(
    client: httpx.AsyncClient, container: Container
) -> None:
    r = await _create(client, key="k1", secret=SUPPLIED)
    assert r.status_code == 201
    assert r.json()["secret"] is None
    sid = r.json()["id"]
    async with container.uow_factory() as uow:
        assert await uow.schedules.secrets("tenant-a", sid, container.clock()) == [SUPPLIED]
    # The same definition and secret again: unchanged.
    same = await client.put(
        "/v1/schedules/by-key/k1", json=schedule_body(secret=SUPPLIED), headers=auth()
    )
    assert same.status_code == 200
    assert same.json()["version"] == 1
    other = "whsec_" + base64.b64encode(b"t" * 24).decode()
    replaced = await client.put(
        "/v1/schedules/by-key/k1", json=schedule_body(secret=other), headers=auth()
    )
    assert replaced.status_code == 200
    assert replaced.json()["version"] == 2
    assert replaced.json()["secret"] is None
    assert other not in replaced.text
    assert SUPPLIED not in replaced.text
    async with container.uow_factory() as uow:
        assert await uow.schedules.secrets("tenant-a", sid, container.clock()) == [other]


@pytest.mark.postgres
async def test_concurrent_creates_of_one_key_one_wins(
    client: httpx.AsyncClient, database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("concurrent writers need PostgreSQL")
    posts = await asyncio.gather(*(_create(client, key="race") for _ in range(2)))
    assert sorted(r.status_code for r in posts) == [201, 409]
    body = schedule_body()
    puts = await asyncio.gather(
        *(client.put("/v1/schedules/by-key/race-put", json=body, headers=auth()) for _ in range(2))
    )
    assert sorted(r.status_code for r in puts) == [200, 201]
    assert puts[0].json()["id"] == puts[1].json()["id"]
