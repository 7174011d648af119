"""Target ports: the API accepts only ports the egress NetworkPolicy opens (80, 443) unless
WEBHOOK_ALLOWED_PORTS says otherwise, on create and on PATCH; a 422 naming `target.url`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from asgi_lifespan import LifespanManager

from scheduler.config import SchedulerSettings
from scheduler.entrypoints.api.app import app_from_container
from tests.scheduler.conftest import StepClock, auth
from tests.scheduler.schedules.conftest import make_container, schedule_body


def _target(url: str) -> dict[str, object]:
    return {"target": {"url": url, "timeout_seconds": 10}}


def _refused(r: httpx.Response) -> None:
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["field"] == "target.url", problem
    assert "port 8443 is not allowed" in problem["detail"]


async def test_create_and_patch_refuse_a_port_the_egress_policy_closes(
    client: httpx.AsyncClient,
) -> None:
    _refused(
        await client.post(
            "/v1/schedules/",
            json=schedule_body(**_target("https://example.com:8443/h")),
            headers=auth(),
        )
    )
    assert (await client.get("/v1/schedules/", headers=auth())).json()["items"] == []
    created = await client.post(
        "/v1/schedules/", json=schedule_body(**_target("http://example.com:80/h")), headers=auth()
    )
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    _refused(
        await client.patch(
            f"/v1/schedules/{sid}", json=_target("https://example.com:8443/h"), headers=auth()
        )
    )
    got = (await client.get(f"/v1/schedules/{sid}", headers=auth())).json()
    assert got["version"] == 1
    assert got["target"]["url"] == "http://example.com:80/h"


@pytest.fixture
async def client_allowing_8443(
    database_url: str, clock: StepClock
) -> AsyncIterator[httpx.AsyncClient]:
    container = make_container(database_url, clock, webhook_allowed_ports=frozenset({443, 8443}))
    application = app_from_container(container)
    async with LifespanManager(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://scheduler.test") as c:
            yield c
    await container.aclose()


async def test_a_configured_allow_list_replaces_the_web_ports(
    client_allowing_8443: httpx.AsyncClient,
) -> None:
    client = client_allowing_8443
    ok = await client.post(
        "/v1/schedules/",
        json=schedule_body(**_target("https://example.com:8443/h")),
        headers=auth(),
    )
    assert ok.status_code == 201, ok.text
    r = await client.post(
        "/v1/schedules/", json=schedule_body(**_target("http://example.com/h")), headers=auth()
    )
    assert r.status_code == 422, r.text
    assert "port 80 is not allowed" in r.json()["detail"]


def test_the_setting_reads_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOK_ALLOWED_PORTS", "443, 8443")
    assert SchedulerSettings().webhook_allowed_ports == frozenset({443, 8443})
    monkeypatch.setenv("WEBHOOK_ALLOWED_PORTS", "")
    assert SchedulerSettings().webhook_allowed_ports is None
    monkeypatch.setenv("WEBHOOK_ALLOWED_PORTS", "443,https")
    with pytest.raises(ValueError, match="https"):
        SchedulerSettings()
