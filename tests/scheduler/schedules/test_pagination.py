"""Cursor pagination: complete, no duplicates, stable when rows are inserted between pages."""

from __future__ import annotations

import httpx

from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body


async def _create(client: httpx.AsyncClient, name: str, **kw: object) -> str:
    r = await client.post("/v1/schedules/", json=schedule_body(name=name, **kw), headers=auth())
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def test_pages_are_complete_and_stable_under_inserts(client: httpx.AsyncClient) -> None:
    created = [await _create(client, f"s{i}") for i in range(7)]
    seen: list[str] = []
    cursor = None
    inserted: list[str] = []
    for _ in range(10):  # bounded: 7 + 2 rows at 3 per page need 4 pages
        params: dict[str, object] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/v1/schedules/", params=params, headers=auth())).json()
        seen += [i["id"] for i in page["items"]]
        cursor = page["next_cursor"]
        if len(inserted) < 2:  # inserts between pages land at the end, never shift pages
            inserted.append(await _create(client, f"late{len(inserted)}"))
        if cursor is None:
            break
    assert seen == created + inserted
    assert len(set(seen)) == len(seen)


async def test_filters_by_action(client: httpx.AsyncClient) -> None:
    hook = await _create(client, "hook")
    ev = await _create(client, "ev", action="event", target=None)
    r = await client.get("/v1/schedules/", params={"action": "event"}, headers=auth())
    assert [i["id"] for i in r.json()["items"]] == [ev]
    r = await client.get("/v1/schedules/", params={"action": "webhook"}, headers=auth())
    assert [i["id"] for i in r.json()["items"]] == [hook]


async def test_a_bad_cursor_is_400_as_in_notification_and_a_bad_limit_422(
    client: httpx.AsyncClient,
) -> None:
    # Garbage, and the shape of another codec (a JSON array): the one codec's 400.
    for cursor in ("garbage!!", "WyIyMDI2LTAxLTAxVDAwOjAwOjAwKzAwOjAwIiwic2NoXzEiXQ"):
        r = await client.get("/v1/schedules/", params={"cursor": cursor}, headers=auth())
        assert r.status_code == 400, (cursor, r.text)
        assert r.json()["field"] == "cursor"
        assert r.json()["type"].endswith("/invalid-cursor")
        assert r.headers["content-type"].startswith("application/problem+json")
    # Longer than any cursor of ours: refused by the parameter's schema, naming it.
    r = await client.get("/v1/schedules/", params={"cursor": "x" * 600}, headers=auth())
    assert (r.status_code, r.json()["field"]) == (422, "cursor"), r.text
    for limit in (0, 101):
        r = await client.get("/v1/schedules/", params={"limit": limit}, headers=auth())
        assert r.status_code == 422
        assert r.json()["field"] == "limit"
