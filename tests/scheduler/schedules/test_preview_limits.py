"""POST /v1/schedules/preview validates timing exactly as create does, the tenant's limits on
it included: a cron too frequent for min_interval_seconds is the same problem on both."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from scheduler.domain.tenant import Entitlements
from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body

URL = "/v1/schedules/"


async def test_preview_refuses_what_create_refuses_for_the_tenants_limits(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    app.state.ctx.limits_for = lambda _t: Entitlements(min_interval_seconds=300)
    timing = {"cron": "* * * * *", "timezone": "UTC"}
    created = await client.post(URL, json=schedule_body(**timing), headers=auth())
    previewed = await client.post(URL + "preview", json=timing, headers=auth())
    assert created.status_code == previewed.status_code == 403, (created.text, previewed.text)
    expected = {"limit": "min_interval_seconds", "limit_value": 300, "current": 60}
    for r in (created, previewed):
        assert {k: r.json()[k] for k in expected} == expected
    assert created.json()["detail"] == previewed.json()["detail"]
    # Within the limit, both answer.
    ok = {"cron": "*/5 * * * *", "timezone": "UTC"}
    assert (await client.post(URL + "preview", json=ok, headers=auth())).status_code == 200
    assert (await client.post(URL, json=schedule_body(**ok), headers=auth())).status_code == 201
