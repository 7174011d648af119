"""Subscriptions API on SQLite and PostgreSQL: shapes, secrets, validation, cursors, tenancy."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import select, update

from notification.adapters.tables import subscriptions
from notification.service_layer import subscriptions as subscriptions_module
from servicekit.data.ids import is_id
from servicekit.data.secretbox import SecretBoxError
from tests.notification.api import UNREACHABLE_URL, subscribe
from tests.notification.conftest import Harness, token

PROBLEM = "application/problem+json"


async def test_create_returns_secret_once_and_stores_it_encrypted(harness: Harness) -> None:
    created = await subscribe(harness, description="ops hook")
    assert is_id(created["id"], "sub")  # the scheduler's sortable id style
    assert created["secret"].startswith("whsec_")
    assert created["event_types"] == ["schedule.*"]
    assert created["created_at"].endswith("Z")  # RFC 3339 UTC, as the scheduler writes it
    got = await harness.client.get(f"/v1/subscriptions/{created['id']}", headers=token("t1"))
    assert got.status_code == 200
    assert "secret" not in got.json()
    assert got.json()["description"] == "ops hook"
    async with harness.app.container.engine.connect() as conn:
        stored = (await conn.execute(select(subscriptions.c.secret_enc))).scalar_one()
    assert created["secret"] not in stored
    assert stored.startswith("v1.")


async def test_rotate_returns_new_secret_and_keeps_old_for_grace(harness: Harness) -> None:
    created = await subscribe(harness)
    resp = await harness.client.post(
        f"/v1/subscriptions/{created['id']}/secret/rotate", headers=token("t1")
    )
    assert resp.status_code == 200
    rotated = resp.json()
    assert rotated["secret"] != created["secret"]
    assert rotated["previous_secret_expires_at"] is not None
    sub = await harness.app.container.store.get_subscription("t1", created["id"])
    assert sub is not None
    secrets = harness.app.container.subscriptions.signing_secrets(sub, harness.clock())
    assert secrets == [rotated["secret"], created["secret"]]
    harness.clock.advance(days=2)  # past the 24 h grace: only the new secret signs
    assert harness.app.container.subscriptions.signing_secrets(sub, harness.clock()) == [
        rotated["secret"]
    ]


async def test_validation_problems_name_the_field(harness: Harness) -> None:
    cases = [
        ({"url": "ftp://x/y", "event_types": ["schedule.*"]}, "url"),
        ({"url": "http://127.0.0.1:\u0668\u0660/h", "event_types": ["schedule.*"]}, "url"),
        ({"url": "http://127.0.0.1:8_0/h", "event_types": ["schedule.*"]}, "url"),
        ({"url": "http://127.0.0.1/h", "event_types": ["sched*ule"]}, "event_types"),
        ({"url": "http://127.0.0.1/h", "event_types": []}, "event_types"),
        ({"url": "http://127.0.0.1/h"}, "event_types"),
        ({"url": "http://127.0.0.1/h", "event_types": ["a"], "extra": 1}, "extra"),
    ]
    for body, field in cases:
        resp = await harness.client.post("/v1/subscriptions/", json=body, headers=token("t1"))
        assert resp.status_code == 422, body
        assert resp.headers["content-type"].startswith(PROBLEM)
        assert resp.json()["field"] == field, resp.json()


async def test_event_types_outside_the_catalogue_are_422_listing_the_valid_ones(
    harness: Harness,
) -> None:
    c = harness.client
    typo = {"url": "http://127.0.0.1/h", "event_types": ["schedule.run.faild"]}
    resp = await c.post("/v1/subscriptions/", json=typo, headers=token("t1"))
    assert resp.status_code == 422
    detail = resp.json()["detail"]
    assert "schedule.run.faild" in detail
    assert "schedule.run.failed" in detail  # the valid ones are listed
    assert "schedule.paused" in detail
    assert (await c.get("/v1/subscriptions/", headers=token("t1"))).json()["items"] == []
    ok = {"url": "http://127.0.0.1/h", "event_types": ["schedule.run.*"]}
    created = (await c.post("/v1/subscriptions/", json=ok, headers=token("t1"))).json()
    patched = await c.patch(
        f"/v1/subscriptions/{created['id']}",
        json={"event_types": ["schedules.*"]},  # a pattern matching nothing is refused too
        headers=token("t1"),
    )
    assert patched.status_code == 422
    assert "schedule.created" in patched.json()["detail"]


async def test_ids_made_in_the_old_uuid_style_stay_valid(harness: Harness) -> None:
    created = await subscribe(harness)
    old = "sub_" + "0123456789abcdef" * 2  # the prefix + UUID hex ids made before one id style
    async with harness.app.container.engine.begin() as conn:
        await conn.execute(
            update(subscriptions).where(subscriptions.c.id == created["id"]).values(id=old)
        )
    got = await harness.client.get(f"/v1/subscriptions/{old}", headers=token("t1"))
    assert got.status_code == 200, got.text
    assert got.json()["id"] == old
    patched = await harness.client.patch(
        f"/v1/subscriptions/{old}", json={"description": "still mine"}, headers=token("t1")
    )
    assert patched.status_code == 200, patched.text


async def test_private_targets_refused_when_not_allowed(make_harness: Any, sqlite_url: str) -> None:
    h = await make_harness(sqlite_url, webhook_allow_private_networks=False)
    resp = await h.client.post(
        "/v1/subscriptions/",
        json={"url": "http://169.254.169.254/latest", "event_types": ["schedule.*"]},
        headers=token("t1"),
    )
    assert resp.status_code == 422
    assert resp.json()["field"] == "url"


async def test_patch_delete_and_cursor_pagination(harness: Harness) -> None:
    ids = []
    for i in range(5):
        # Distinct urls: an exact duplicate is refused (409).
        ids.append((await subscribe(harness, url=f"{UNREACHABLE_URL}?n={i}"))["id"])
        harness.clock.advance(seconds=1)
    seen, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (
            await harness.client.get("/v1/subscriptions/", params=params, headers=token("t1"))
        ).json()
        seen += [s["id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids  # oldest first, each once
    patched = await harness.client.patch(
        f"/v1/subscriptions/{ids[0]}",
        json={"enabled": False, "event_types": ["schedule.run.failed"]},
        headers=token("t1"),
    )
    assert patched.status_code == 200
    assert patched.json()["enabled"] is False
    assert patched.json()["disabled_reason"] == "disabled_by_tenant"
    assert patched.json()["event_types"] == ["schedule.run.failed"]
    null = await harness.client.patch(
        f"/v1/subscriptions/{ids[0]}", json={"url": None}, headers=token("t1")
    )
    assert null.status_code == 422
    assert null.json()["field"] == "url"
    assert (
        await harness.client.delete(f"/v1/subscriptions/{ids[1]}", headers=token("t1"))
    ).status_code == 204
    assert (
        await harness.client.get(f"/v1/subscriptions/{ids[1]}", headers=token("t1"))
    ).status_code == 404
    listed = (await harness.client.get("/v1/subscriptions/", headers=token("t1"))).json()
    assert ids[1] not in [s["id"] for s in listed["items"]]
    bad = await harness.client.get(
        "/v1/subscriptions/", params={"cursor": "bm90LWEtY3Vyc29y"}, headers=token("t1")
    )
    assert bad.status_code == 400
    assert bad.json()["field"] == "cursor"
    over = await harness.client.get(
        "/v1/subscriptions/", params={"limit": 101}, headers=token("t1")
    )
    assert over.status_code == 422
    assert over.json()["field"] == "limit"


async def test_other_tenant_gets_404_everywhere(harness: Harness) -> None:
    sub_id = (await subscribe(harness, tenant="t1"))["id"]
    other = token("t2")
    c = harness.client
    for method, path, body in [
        ("GET", f"/v1/subscriptions/{sub_id}", None),
        ("PATCH", f"/v1/subscriptions/{sub_id}", {"enabled": False}),
        ("DELETE", f"/v1/subscriptions/{sub_id}", None),
        ("POST", f"/v1/subscriptions/{sub_id}/secret/rotate", None),
        ("GET", f"/v1/subscriptions/{sub_id}/deliveries", None),
        ("POST", f"/v1/subscriptions/{sub_id}/deliveries/msg_x/replay", None),
    ]:
        resp = await c.request(method, path, json=body, headers=other)
        assert resp.status_code == 404, (method, path)
        assert resp.headers["content-type"].startswith(PROBLEM)
    assert (await c.get("/v1/subscriptions/", headers=other)).json()["items"] == []
    # and the owner still sees it untouched
    assert (await c.get(f"/v1/subscriptions/{sub_id}", headers=token("t1"))).json()["enabled"]


async def test_auth_401_403_and_open_endpoints(harness: Harness) -> None:
    c = harness.client
    missing = await c.get("/v1/subscriptions/")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    read_only = token("t1", ["notifications:read"])
    denied = await c.post(
        "/v1/subscriptions/",
        json={"url": "http://127.0.0.1/h", "event_types": ["a.*"]},
        headers=read_only,
    )
    assert denied.status_code == 403
    assert (await c.get("/v1/subscriptions/", headers=read_only)).status_code == 200
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        assert (await c.get(path)).status_code == 200, path
    paths = (await c.get("/openapi.json")).json()["paths"]
    assert "/v1/subscriptions/{sub_id}/deliveries/{delivery_id}/replay" in paths


async def test_decrypted_secrets_are_cached_per_ciphertext_and_subscription(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = harness.app.container.subscriptions
    subs = []
    for i in range(2):
        created = await subscribe(harness, url=f"{UNREACHABLE_URL}?n={i}")
        sub = await harness.app.container.store.get_subscription("t1", created["id"])
        assert sub is not None
        subs.append((sub, created["secret"]))
    (one, secret_one), (two, secret_two) = subs
    calls: list[str] = []
    decrypt = service.box.decrypt

    def counted(token: str, aad: bytes = b"") -> str:
        calls.append(token)
        return decrypt(token, aad)

    monkeypatch.setattr(service.box, "decrypt", counted)
    now = harness.clock()
    assert service.signing_secrets(one, now) == [secret_one]
    assert service.signing_secrets(one, now) == [secret_one]
    assert calls == [one.secret_enc]  # decrypted once
    # Keyed by the subscription too: its ciphertext under another id (another AAD) still
    # fails to decrypt, and a failure is not cached.
    with pytest.raises(SecretBoxError):
        service.signing_secrets(replace(one, id=two.id), now)
    # Bounded: full, it is emptied.
    monkeypatch.setattr(subscriptions_module, "PLAINTEXT_CACHE_SIZE", 1)
    assert service.signing_secrets(two, now) == [secret_two]
    assert service.signing_secrets(one, now) == [secret_one]
    assert calls == [one.secret_enc, one.secret_enc, two.secret_enc, one.secret_enc]
