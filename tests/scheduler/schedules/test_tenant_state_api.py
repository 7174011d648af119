"""The API with the tenant projections wired in: a suspended tenant's writes answer 403
`tenant-suspended` while its reads work; limits come from the entitlements projection; resume is
refused (403 quota-exceeded) while the schedule breaks a limit."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx

from eventbus import envelope
from scheduler.bootstrap import Container
from scheduler.service_layer import tenant_events
from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body


async def _apply(container: Container, kind: str, tenant: str, **data: Any) -> None:
    event = envelope(
        id=f"evt_{kind}_{tenant}_{container.clock().timestamp()}",
        type=kind,
        tenant_id=tenant,
        time=container.clock() - timedelta(seconds=1),
        data=data,
    )
    report = await tenant_events.apply_events(container.uow_factory(), [event], container.clock())
    assert report.applied == 1


async def test_suspended_tenant_reads_but_cannot_write(
    client: httpx.AsyncClient, container: Container
) -> None:
    created = await client.post("/v1/schedules/", json=schedule_body(), headers=auth())
    sid = created.json()["id"]
    await _apply(container, "tenant.suspended", "tenant-a")

    writes = [
        ("POST", "/v1/schedules/", schedule_body(name="another")),
        ("PATCH", f"/v1/schedules/{sid}", {"name": "renamed"}),
        ("POST", f"/v1/schedules/{sid}/pause", None),
        ("POST", f"/v1/schedules/{sid}/trigger", None),
        ("POST", f"/v1/schedules/{sid}/secret/rotate", None),
        ("DELETE", f"/v1/schedules/{sid}", None),
    ]
    for method, path, body in writes:
        r = await client.request(method, path, json=body, headers=auth())
        assert r.status_code == 403, (method, path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"].endswith("/tenant-suspended")
    assert (await client.get(f"/v1/schedules/{sid}", headers=auth())).json()["name"] == (
        "nightly-report"
    )
    assert (await client.get(f"/v1/schedules/{sid}/runs", headers=auth())).status_code == 200
    # Another tenant is unaffected.
    r = await client.post("/v1/schedules/", json=schedule_body(), headers=auth("tenant-b"))
    assert r.status_code == 201

    await _apply(container, "tenant.reinstated", "tenant-a")
    r = await client.patch(f"/v1/schedules/{sid}", json={"name": "renamed"}, headers=auth())
    assert r.status_code == 200


async def test_limits_come_from_the_projection_and_resume_is_checked(
    client: httpx.AsyncClient, container: Container
) -> None:
    body = schedule_body(cron="*/10 * * * *", timezone="UTC")
    sid = (await client.post("/v1/schedules/", json=body, headers=auth())).json()["id"]
    assert (await client.post(f"/v1/schedules/{sid}/pause", headers=auth())).status_code == 200
    await _apply(
        container, "entitlements.updated", "tenant-a", limits={"min_interval_seconds": 3600}
    )
    await container.tenants.refresh()  # the API's limits are the cached projection

    r = await client.post(f"/v1/schedules/{sid}/resume", headers=auth())
    assert r.status_code == 403, r.text
    problem = r.json()
    assert problem["type"].endswith("/quota-exceeded")
    assert (problem["limit"], problem["limit_value"], problem["current"]) == (
        "min_interval_seconds",
        3600,
        600,
    )
    r = await client.post("/v1/schedules/", json=body, headers=auth())
    assert r.status_code == 403
    assert r.json()["limit"] == "min_interval_seconds"
    # An hourly cron fits: the update is accepted and the schedule may resume.
    r = await client.patch(f"/v1/schedules/{sid}", json={"cron": "0 * * * *"}, headers=auth())
    assert r.status_code == 200, r.text
    r = await client.post(f"/v1/schedules/{sid}/resume", headers=auth())
    assert r.status_code == 200
    assert r.json()["state"] == "active"
