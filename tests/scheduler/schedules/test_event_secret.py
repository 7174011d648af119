"""An event schedule has no webhook, so no signing secret: none is generated, stored or shown;
rotate refuses it; a PATCH to webhook generates one (shown once), a PATCH to event drops it."""

from __future__ import annotations

from typing import Any

import httpx
import sqlalchemy as sa

from scheduler.adapters.db.tables import schedules
from scheduler.bootstrap import Container
from tests.scheduler.conftest import auth
from tests.scheduler.schedules.conftest import schedule_body

TARGET = {"url": "https://example.com/hook", "timeout_seconds": 10}


async def _stored(container: Container, schedule_id: str) -> tuple[str, str | None]:
    async with container.engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(
                    schedules.c.secret_ciphertext, schedules.c.previous_secret_ciphertext
                ).where(schedules.c.id == schedule_id)
            )
        ).one()
    return row[0], row[1]


async def _secrets(container: Container, schedule_id: str) -> list[str]:
    async with container.uow_factory() as uow:
        return await uow.schedules.secrets("tenant-a", schedule_id, container.clock())


async def _create_event(client: httpx.AsyncClient, **headers: str) -> httpx.Response:
    return await client.post(
        "/v1/schedules/",
        json=schedule_body(action="event", target=None),
        headers={**auth(), **headers},
    )


async def test_event_schedule_has_no_secret(
    client: httpx.AsyncClient, container: Container
) -> None:
    r = await _create_event(client)
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    assert created["secret"] is None
    assert await _secrets(container, created["id"]) == []
    assert await _stored(container, created["id"]) == ("", None)  # nothing meaningful stored
    # An idempotent replay answers the same: no secret.
    first = await _create_event(client, **{"Idempotency-Key": "k1"})
    replay = await _create_event(client, **{"Idempotency-Key": "k1"})
    assert replay.status_code == 200, replay.text
    assert first.json()["secret"] is None
    assert replay.json()["secret"] is None


async def test_rotate_on_an_event_schedule_is_409_not_a_webhook(
    client: httpx.AsyncClient, container: Container
) -> None:
    sid = (await _create_event(client)).json()["id"]
    r = await client.post(f"/v1/schedules/{sid}/secret/rotate", headers=auth())
    assert r.status_code == 409, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["type"].endswith("/not-a-webhook")
    assert "event schedules are not signed" in problem["detail"]
    assert problem["instance"] == f"/v1/schedules/{sid}/secret/rotate"
    assert await _stored(container, sid) == ("", None)
    assert (await client.get(f"/v1/schedules/{sid}", headers=auth())).json()["version"] == 1


async def test_patch_to_webhook_generates_a_secret_shown_once(
    client: httpx.AsyncClient, container: Container
) -> None:
    sid = (await _create_event(client)).json()["id"]
    r = await client.patch(
        f"/v1/schedules/{sid}", json={"action": "webhook", "target": TARGET}, headers=auth()
    )
    assert r.status_code == 200, r.text
    secret = r.json()["secret"]
    assert isinstance(secret, str)
    assert secret
    assert await _secrets(container, sid) == [secret]
    # Shown once: a later PATCH or GET does not repeat it.
    later = await client.patch(f"/v1/schedules/{sid}", json={"name": "renamed"}, headers=auth())
    assert later.status_code == 200, later.text
    assert later.json()["secret"] is None
    assert "secret" not in (await client.get(f"/v1/schedules/{sid}", headers=auth())).json()
    rotated = await client.post(f"/v1/schedules/{sid}/secret/rotate", headers=auth())
    assert rotated.status_code == 200, rotated.text
    assert rotated.json()["secret"] not in (None, secret)


async def test_patch_to_event_drops_the_secret(
    client: httpx.AsyncClient, container: Container
) -> None:
    created = await client.post("/v1/schedules/", json=schedule_body(), headers=auth())
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    assert created.json()["secret"]
    rotated = await client.post(f"/v1/schedules/{sid}/secret/rotate", headers=auth())
    assert rotated.status_code == 200  # the old secret is now kept for the grace period
    r = await client.patch(
        f"/v1/schedules/{sid}", json={"action": "event", "target": None}, headers=auth()
    )
    assert r.status_code == 200, r.text
    assert r.json()["secret"] is None
    assert await _secrets(container, sid) == []
    assert await _stored(container, sid) == ("", None)  # the grace-period secret is gone too
    again = await client.post(f"/v1/schedules/{sid}/secret/rotate", headers=auth())
    assert again.status_code == 409, again.text
