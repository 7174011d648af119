"""The schedule lifecycle through the HTTP API, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx

from tests.scheduler.conftest import StepClock, auth
from tests.scheduler.schedules.conftest import schedule_body

URL = "/v1/schedules/"


async def create(client: httpx.AsyncClient, tenant: str = "tenant-a", **kw: object) -> dict:
    r = await client.post(URL, json=schedule_body(**kw), headers=auth(tenant))
    assert r.status_code == 201, r.text
    return r.json()


async def test_create_returns_full_schedule_with_secret_once(client: httpx.AsyncClient) -> None:
    r = await client.post(URL, json=schedule_body(), headers=auth())
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["id"].startswith("sch_")
    assert body["secret"].startswith("whsec_")
    assert body["state"] == "active"
    assert body["paused_reason"] is None
    assert body["target"] == {
        "url": "https://example.com/hook",
        "headers": {"X-Team": "ops"},
        "timeout_seconds": 10,
    }
    assert body["retry_policy"]["max_attempts"] == 5
    assert body["misfire_policy"] == "fire_once"
    assert body["overlap_policy"] == "allow"
    assert body["breaker"] == {"failure_threshold": 5}
    # 2026-03-01 is a Sunday: the next weekday 03:00 in Addis Ababa (UTC+3) is Monday 00:00 UTC.
    assert body["next_run_at"].startswith("2026-03-02T00:00:00")
    assert r.headers["location"] == f"/v1/schedules/{body['id']}"
    assert r.headers["etag"] == '"1"'

    got = await client.get(URL + body["id"], headers=auth())
    assert got.status_code == 200
    assert "secret" not in got.json()
    assert secret_free(got.text, body["secret"])
    listed = await client.get(URL, headers=auth())
    assert secret_free(listed.text, body["secret"])
    assert [i["id"] for i in listed.json()["items"]] == [body["id"]]


def secret_free(text: str, secret: str) -> bool:
    return secret not in text and secret.removeprefix("whsec_") not in text


async def test_event_action_needs_no_target(client: httpx.AsyncClient) -> None:
    body = await create(client, action="event", target=None, cron="*/5 * * * *", timezone="UTC")
    assert body["action"] == "event"
    assert body["target"] is None


async def test_patch_changes_fields_and_recomputes_next_run(client: httpx.AsyncClient) -> None:
    s = await create(client)
    r = await client.patch(
        URL + s["id"],
        json={"cron": "30 14 * * *", "timezone": "UTC", "name": "renamed"},
        headers={**auth(), "If-Match": '"1"'},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["name"] == "renamed"
    assert body["cron"] == "30 14 * * *"
    assert body["next_run_at"].startswith("2026-03-01T14:30:00")
    assert body["version"] == 2
    assert r.headers["etag"] == '"2"'
    # Untouched fields keep their values.
    assert body["target"]["headers"] == {"X-Team": "ops"}


async def test_patch_with_stale_etag_is_412(client: httpx.AsyncClient) -> None:
    s = await create(client)
    ok = await client.patch(
        URL + s["id"], json={"name": "a"}, headers={**auth(), "If-Match": '"1"'}
    )
    assert ok.status_code == 200
    stale = await client.patch(
        URL + s["id"], json={"name": "b"}, headers={**auth(), "If-Match": '"1"'}
    )
    assert stale.status_code == 412
    assert stale.headers["content-type"] == "application/problem+json"
    assert (await client.get(URL + s["id"], headers=auth())).json()["name"] == "a"


async def test_pause_and_resume(client: httpx.AsyncClient, clock: StepClock) -> None:
    s = await create(client, cron="0 * * * *", timezone="UTC")
    p = await client.post(URL + s["id"] + "/pause", json={"reason": "maintenance"}, headers=auth())
    assert p.status_code == 200, p.text
    assert p.json()["state"] == "paused"
    assert p.json()["paused_reason"] == "maintenance"
    assert p.json()["next_run_at"] is None  # pausing means no intent
    listed = await client.get(URL, params={"state": "paused"}, headers=auth())
    assert [i["id"] for i in listed.json()["items"]] == [s["id"]]
    assert (await client.get(URL, params={"state": "active"}, headers=auth())).json()["items"] == []

    clock.advance(hours=5)  # occurrences inside the pause are not planned
    r = await client.post(URL + s["id"] + "/resume", headers=auth())
    assert r.status_code == 200
    assert r.json()["state"] == "active"
    assert r.json()["paused_reason"] is None
    assert r.json()["next_run_at"].startswith("2026-03-01T18:00:00")


async def test_pause_without_body(client: httpx.AsyncClient) -> None:
    s = await create(client)
    p = await client.post(URL + s["id"] + "/pause", headers=auth())
    assert p.status_code == 200
    assert p.json()["paused_reason"] is None


async def test_delete_is_soft_and_404_after(client: httpx.AsyncClient) -> None:
    s = await create(client)
    d = await client.delete(URL + s["id"], headers=auth())
    assert d.status_code == 204
    assert d.content == b""
    for method, suffix in [("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/pause")]:
        r = await client.request(method, URL + s["id"] + suffix, json={}, headers=auth())
        assert r.status_code == 404, (method, suffix, r.status_code)
    assert (await client.get(URL, headers=auth())).json()["items"] == []


async def test_rotate_returns_new_secret(client: httpx.AsyncClient) -> None:
    s = await create(client)
    r = await client.post(URL + s["id"] + "/secret/rotate", headers=auth())
    assert r.status_code == 200, r.text
    assert r.json()["secret"].startswith("whsec_")
    assert r.json()["secret"] != s["secret"]
    assert r.json()["version"] == 2


async def test_occurrences_preview(client: httpx.AsyncClient) -> None:
    s = await create(client, cron="0 3 * * *", timezone="America/New_York")
    r = await client.get(URL + s["id"] + "/occurrences", params={"count": 3}, headers=auth())
    assert r.status_code == 200, r.text
    assert r.json() == {
        "timezone": "America/New_York",
        "items": [
            {"at": "2026-03-02T03:00:00-05:00", "utc": "2026-03-02T08:00:00Z", "dst": None},
            {"at": "2026-03-03T03:00:00-05:00", "utc": "2026-03-03T08:00:00Z", "dst": None},
            {"at": "2026-03-04T03:00:00-05:00", "utc": "2026-03-04T08:00:00Z", "dst": None},
        ],
    }
    for bad in (0, 101):
        r = await client.get(URL + s["id"] + "/occurrences", params={"count": bad}, headers=auth())
        assert r.status_code == 422
        assert r.json()["field"] == "count"


async def test_secret_never_logged(client: httpx.AsyncClient, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    caplog.set_level(logging.DEBUG)  # everything, SQL included, is captured
    h = {**auth(), "Idempotency-Key": "log-key"}
    s = (await client.post(URL, json=schedule_body(), headers=h)).json()
    replay = (await client.post(URL, json=schedule_body(), headers=h)).json()
    rotated = (await client.post(URL + s["id"] + "/secret/rotate", headers=auth())).json()
    await client.post(URL, json=schedule_body(name="x"), headers=h)  # a 409 error path
    secrets = {s["secret"], replay["secret"], rotated["secret"]}
    assert len(secrets) == 2
    for secret in secrets:
        assert secret_free(caplog.text, secret)
