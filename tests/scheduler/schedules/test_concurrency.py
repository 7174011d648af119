"""Two PATCHes racing with the same ETag: exactly one wins, the other gets 412. On PostgreSQL the
two run on separate connections at the same time (real row-lock contention)."""

from __future__ import annotations

import asyncio

import httpx

from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body


async def test_same_etag_race_one_wins(client: httpx.AsyncClient) -> None:
    for round_ in range(3):  # a few rounds: the interleaving differs between them
        s = (await client.post("/v1/schedules/", json=schedule_body(), headers=auth())).json()
        h = {**auth(), "If-Match": '"1"'}
        a, b = await asyncio.gather(
            client.patch(f"/v1/schedules/{s['id']}", json={"name": f"a{round_}"}, headers=h),
            client.patch(f"/v1/schedules/{s['id']}", json={"name": f"b{round_}"}, headers=h),
        )
        assert sorted([a.status_code, b.status_code]) == [200, 412], (a.text, b.text)
        winner = a if a.status_code == 200 else b
        final = (await client.get(f"/v1/schedules/{s['id']}", headers=auth())).json()
        assert final["name"] == winner.json()["name"]
        assert final["version"] == 2


async def test_if_match_star_and_weak_tags(client: httpx.AsyncClient) -> None:
    s = (await client.post("/v1/schedules/", json=schedule_body(), headers=auth())).json()
    url = f"/v1/schedules/{s['id']}"
    assert (
        await client.patch(url, json={"name": "x"}, headers={**auth(), "If-Match": "*"})
    ).status_code == 200
    assert (
        await client.patch(url, json={"name": "y"}, headers={**auth(), "If-Match": 'W/"2"'})
    ).status_code == 200
    assert (
        await client.patch(url, json={"name": "z"}, headers={**auth(), "If-Match": "junk"})
    ).status_code == 412
    assert (await client.delete(url, headers={**auth(), "If-Match": '"1"'})).status_code == 412
