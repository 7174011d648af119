"""Every schedule state change through the API writes its event to the outbox in the same
transaction; refused or no-op requests write none."""

from __future__ import annotations

import json

import httpx
import sqlalchemy as sa

from scheduler.bootstrap import Container
from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body


async def outbox(container: Container) -> list[dict[str, object]]:
    async with container.engine.connect() as conn:
        rows = (await conn.execute(sa.text("SELECT payload FROM outbox ORDER BY id"))).all()
    return [json.loads(r[0]) for r in rows]


async def test_lifecycle_events_in_order(client: httpx.AsyncClient, container: Container) -> None:
    s = (await client.post("/v1/schedules/", json=schedule_body(), headers=auth())).json()
    url = f"/v1/schedules/{s['id']}"
    await client.patch(url, json={"name": "renamed"}, headers=auth())
    await client.post(url + "/pause", json={"reason": "r"}, headers=auth())
    await client.post(url + "/resume", headers=auth())
    await client.post(url + "/resume", headers=auth())  # already active: no event
    await client.patch(url, json={"cron": "bad"}, headers=auth())  # refused: no event
    await client.delete(url, headers=auth())
    events = await outbox(container)
    assert [e["type"] for e in events] == [
        "schedule.created",
        "schedule.updated",
        "schedule.paused",
        "schedule.resumed",
        "schedule.deleted",
    ]
    assert {e["schedule_id"] for e in events} == {s["id"]}
    assert {e["tenant_id"] for e in events} == {"tenant-a"}
    assert len({e["id"] for e in events}) == 5
    # Envelope time is RFC 3339 UTC with `Z` (as every API response); no secret in an event.
    assert all(str(e["time"]).endswith("Z") for e in events)
    assert s["secret"] not in json.dumps(events)
