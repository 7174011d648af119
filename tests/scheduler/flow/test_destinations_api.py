"""/v1/destinations through the HTTP API (DESIGN.md §7b "Flow control"), on SQLite and
PostgreSQL: validation, canonical host:port, defaults for a destination without a policy, live
state, the per-tenant cap, tenant scoping."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from scheduler.adapters.db.tables import outbox
from scheduler.bootstrap import Container
from scheduler.service_layer.flow_ports import Key
from servicekit.flow import FlowState
from tests.scheduler.conftest import auth

URL = "/v1/destinations/"


async def test_put_get_list_delete(client: httpx.AsyncClient) -> None:
    r = await client.put(
        f"{URL}API.Example.com:443", json={"max_in_flight": 5, "per_second": 2.5}, headers=auth()
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["destination"] == "api.example.com:443"
    assert (body["max_in_flight"], body["per_second"], body["configured"]) == (5, 2.5, True)
    assert (body["held_until"], body["current_rate"], body["in_flight"]) == (None, None, 0)
    r = await client.put(f"{URL}api.example.com:443", json={"max_in_flight": 7}, headers=auth())
    assert r.status_code == 200, r.text
    assert (r.json()["max_in_flight"], r.json()["per_second"]) == (7, None)
    got = (await client.get(f"{URL}api.example.com:443", headers=auth())).json()
    assert got["max_in_flight"] == 7
    await client.put(f"{URL}b.example:80", json={"max_in_flight": 1}, headers=auth())
    listed = (await client.get(URL, params={"limit": 1}, headers=auth())).json()
    assert [d["destination"] for d in listed["items"]] == ["api.example.com:443"]
    nxt = await client.get(URL, params={"cursor": listed["next_cursor"]}, headers=auth())
    assert [d["destination"] for d in nxt.json()["items"]] == ["b.example:80"]
    assert nxt.json()["next_cursor"] is None
    assert (await client.delete(f"{URL}api.example.com:443", headers=auth())).status_code == 204
    assert (await client.delete(f"{URL}api.example.com:443", headers=auth())).status_code == 404
    # No policy: the defaults, not configured.
    got = (await client.get(f"{URL}api.example.com:443", headers=auth())).json()
    assert (got["configured"], got["max_in_flight"], got["per_second"]) == (False, 10, None)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("example.com", {"max_in_flight": 1}),
        ("example.com:0", {"max_in_flight": 1}),
        ("example.com:70000", {"max_in_flight": 1}),
        ("exa_mple com:80", {"max_in_flight": 1}),
        ("example.com:80", {"max_in_flight": 0}),
        ("example.com:80", {"max_in_flight": 101}),
        ("example.com:80", {"max_in_flight": 5, "per_second": 0.01}),
        ("example.com:80", {"max_in_flight": 5, "per_second": 1001}),
        ("example.com:80", {}),
    ],
)
async def test_invalid_is_422(
    client: httpx.AsyncClient, path: str, body: dict[str, object]
) -> None:
    r = await client.put(URL + path, json=body, headers=auth())
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")


async def test_another_tenant_cannot_see_or_change_it(client: httpx.AsyncClient) -> None:
    await client.put(f"{URL}a.example:443", json={"max_in_flight": 3}, headers=auth())
    other = auth("tenant-b")
    assert (await client.get(URL, headers=other)).json()["items"] == []
    got = (await client.get(f"{URL}a.example:443", headers=other)).json()
    assert (got["configured"], got["max_in_flight"]) == (False, 10)
    assert (await client.delete(f"{URL}a.example:443", headers=other)).status_code == 404
    mine = (await client.get(f"{URL}a.example:443", headers=auth())).json()
    assert (mine["configured"], mine["max_in_flight"]) == (True, 3)


async def test_the_per_tenant_cap(app: FastAPI, client: httpx.AsyncClient) -> None:
    app.state.ctx.max_destinations = 2
    for host in ("a", "b"):
        r = await client.put(f"{URL}{host}.example:80", json={"max_in_flight": 1}, headers=auth())
        assert r.status_code == 201
    r = await client.put(f"{URL}c.example:80", json={"max_in_flight": 1}, headers=auth())
    assert r.status_code == 403
    assert r.json()["limit"] == "max_destinations"
    # Updating one it has is not a new one; another tenant has its own count.
    r = await client.put(f"{URL}a.example:80", json={"max_in_flight": 2}, headers=auth())
    assert r.status_code == 200
    r = await client.put(f"{URL}c.example:80", json={"max_in_flight": 1}, headers=auth("tenant-b"))
    assert r.status_code == 201


async def test_live_state_is_shown_and_expires(app: FastAPI, client: httpx.AsyncClient) -> None:
    ctx = app.state.ctx
    now = ctx.clock()
    key: Key = ("tenant-a", "slow.example:443")
    async with ctx.uow_factory() as uow:
        state = FlowState(held_until=now + timedelta(seconds=60), current_rate=4.0, cut_at=now)
        await uow.destinations.save_states({key: state}, now)
        await uow.commit()
    listed = (await client.get(URL, headers=auth())).json()["items"]
    assert [(d["destination"], d["configured"]) for d in listed] == [("slow.example:443", False)]
    got = (await client.get(f"{URL}slow.example:443", headers=auth())).json()
    assert got["current_rate"] == 4.0
    assert got["held_until"] is not None
    ctx.clock = lambda: now + timedelta(hours=2)  # the hold ended, the adaptive rate expired
    got = (await client.get(f"{URL}slow.example:443", headers=auth())).json()
    assert (got["held_until"], got["current_rate"]) == (None, None)


async def test_policy_changes_are_published_for_notification(
    container: Container, client: httpx.AsyncClient
) -> None:
    """Notification's fan-out deliveries obey the same limits: every PUT and DELETE is an
    event on `destination-events`, written with the change (the outbox)."""
    path = f"{URL}hooks.example:443"
    assert (await client.put(path, json={"max_in_flight": 2}, headers=auth())).status_code == 201
    r = await client.put(path, json={"max_in_flight": 3, "per_second": 1.5}, headers=auth())
    assert r.status_code == 200
    assert (await client.delete(path, headers=auth())).status_code == 204
    async with container.engine.connect() as conn:
        rows = (await conn.execute(sa.select(outbox).order_by(outbox.c.id))).all()
    assert [(r.topic, r.key, r.type) for r in rows] == [
        ("destination-events", "tenant-a|hooks.example:443", "destination.updated"),
        ("destination-events", "tenant-a|hooks.example:443", "destination.updated"),
        ("destination-events", "tenant-a|hooks.example:443", "destination.deleted"),
    ]
    envelopes = [json.loads(r.payload) for r in rows]
    assert [e["data"] for e in envelopes] == [
        {"destination": "hooks.example:443", "max_in_flight": 2, "per_second": None},
        {"destination": "hooks.example:443", "max_in_flight": 3, "per_second": 1.5},
        {"destination": "hooks.example:443"},
    ]
    assert all(e["tenant_id"] == "tenant-a" and "schedule_id" not in e for e in envelopes)
