"""Schedule versions through the HTTP API (DESIGN.md §7b), on SQLite and PostgreSQL: who changed
what and when, one version's definition, restore, tenant scoping, secrets never shown, and no
version without its change (same transaction)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import sqlalchemy as sa

from authclient import mint_token
from scheduler.adapters.db.tables import outbox, schedule_versions
from scheduler.adapters.db.unit_of_work import SqlUnitOfWork
from scheduler.bootstrap import Container
from scheduler.domain.versions import Actor, Source
from scheduler.entrypoints.api.schemas import DefinitionOut
from scheduler.service_layer.pausing import pause
from servicekit.data.pagination import encode_cursor
from tests.scheduler.conftest import ALL_SCOPES, HS256_KEY, StepClock, auth
from tests.scheduler.schedules.conftest import schedule_body

URL = "/v1/schedules/"


def as_user(subject: str, tenant: str = "tenant-a") -> dict[str, str]:
    minted = mint_token(HS256_KEY, tenant_id=tenant, subject=subject, scopes=ALL_SCOPES)
    return {"Authorization": f"Bearer {minted}"}


async def create(client: httpx.AsyncClient, subject: str = "alice", **kw: object) -> dict:
    r = await client.post(URL, json=schedule_body(**kw), headers=as_user(subject))
    assert r.status_code == 201, r.text
    return r.json()


async def versions(client: httpx.AsyncClient, sid: str, **params: object) -> dict:
    r = await client.get(f"{URL}{sid}/versions", params=params, headers=auth())
    assert r.status_code == 200, r.text
    return r.json()


async def version_rows(container: Container, sid: str) -> list[dict]:
    async with container.engine.connect() as conn:
        result = await conn.execute(
            sa.select(schedule_versions)
            .where(schedule_versions.c.schedule_id == sid)
            .order_by(schedule_versions.c.version)
        )
        return [dict(r._mapping) for r in result]


async def version_rows_in(uow: SqlUnitOfWork, sid: str) -> list[dict]:
    q = sa.select(schedule_versions).where(schedule_versions.c.schedule_id == sid)
    return [dict(r._mapping) for r in await uow.conn.execute(q.order_by("version"))]


async def test_create_patch_pause_resume_each_write_a_version_by_their_author(
    client: httpx.AsyncClient,
) -> None:
    s = await create(client, "alice")
    sid = s["id"]
    patched = await client.patch(
        URL + sid, json={"cron": "0 4 * * *", "name": "renamed"}, headers=as_user("bob")
    )
    assert patched.status_code == 200, patched.text
    paused = await client.post(
        f"{URL}{sid}/pause", json={"reason": "maintenance"}, headers=as_user("carol")
    )
    assert paused.status_code == 200
    resumed = await client.post(f"{URL}{sid}/resume", headers=as_user("alice"))
    assert resumed.json()["version"] == 4

    items = (await versions(client, sid))["items"]
    assert [(i["version"], i["actor"], i["source"]) for i in items] == [
        (4, "alice", "api"),
        (3, "carol", "api"),
        (2, "bob", "api"),
        (1, "alice", "api"),
    ]
    assert items[3]["changes"] == []  # the creation
    assert items[2]["changes"] == [
        {"field": "cron", "from": "0 3 * * 1-5", "to": "0 4 * * *"},
        {"field": "name", "from": "nightly-report", "to": "renamed"},
    ]
    assert items[1]["changes"] == [
        {"field": "paused_reason", "from": None, "to": "maintenance"},
        {"field": "state", "from": "active", "to": "paused"},
    ]
    assert items[0]["changes"] == [
        {"field": "paused_reason", "from": "maintenance", "to": None},
        {"field": "state", "from": "paused", "to": "active"},
    ]
    assert all(i["at"].endswith("Z") for i in items)


async def test_schedule_updated_names_the_versions_changed_fields(
    client: httpx.AsyncClient, container: Container
) -> None:
    sid = (await create(client))["id"]
    # name unchanged (same value), payload changed: only the real change is named.
    r = await client.patch(
        URL + sid, json={"name": "nightly-report", "payload": {"x": 1}}, headers=auth()
    )
    assert r.status_code == 200
    async with container.engine.connect() as conn:
        payloads = (
            await conn.execute(
                sa.select(outbox.c.payload).where(outbox.c.type == "schedule.updated")
            )
        ).scalars()
        (event,) = [json.loads(p) for p in payloads]
    assert event["data"]["version"] == 2
    assert event["data"]["changed"] == ["payload"]
    (item, _) = (await versions(client, sid))["items"]
    assert [c["field"] for c in item["changes"]] == event["data"]["changed"]


async def test_a_version_reads_back_its_definition_and_state(client: httpx.AsyncClient) -> None:
    s = await create(client, labels={"team": "ops"})
    sid = s["id"]
    await client.patch(URL + sid, json={"cron": "*/5 * * * *"}, headers=auth())
    r = await client.get(f"{URL}{sid}/versions/1", headers=auth())
    assert r.status_code == 200, r.text
    v = r.json()
    assert (v["version"], v["schedule_id"], v["state"], v["actor"]) == (1, sid, "active", "alice")
    definition = v["definition"]
    # Every definition field a schedule answers, with the same value at version 1.
    assert set(definition) == set(DefinitionOut.model_fields)
    for name in set(definition) - {"cron"}:
        assert definition[name] == s[name], name
    assert definition["cron"] == "0 3 * * 1-5"
    assert (await client.get(f"{URL}{sid}/versions/2", headers=auth())).json()["definition"][
        "cron"
    ] == "*/5 * * * *"
    missing = await client.get(f"{URL}{sid}/versions/3", headers=auth())
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")


async def test_restore_writes_a_new_version_with_the_old_definition_and_replans(
    client: httpx.AsyncClient,
) -> None:
    s = await create(client, timezone="UTC")
    sid = s["id"]
    patched = await client.patch(
        URL + sid, json={"cron": "*/10 * * * *", "payload": {"v": 2}}, headers=auth()
    )
    assert patched.json()["next_run_at"] == "2026-03-01T12:10:00Z"
    restored = await client.post(f"{URL}{sid}/versions/1/restore", headers=as_user("dave"))
    assert restored.status_code == 200, restored.text
    body = restored.json()
    assert (body["version"], body["cron"], body["payload"]) == (3, "0 3 * * 1-5", s["payload"])
    assert restored.headers["etag"] == '"3"'
    # Re-planned from the restored timing: Monday 03:00 UTC.
    assert body["next_run_at"] == "2026-03-02T03:00:00Z"
    v3 = (await client.get(f"{URL}{sid}/versions/3", headers=auth())).json()
    v1 = (await client.get(f"{URL}{sid}/versions/1", headers=auth())).json()
    assert v3["definition"] == v1["definition"]
    assert (v3["actor"], v3["source"]) == ("dave", "api")
    assert {c["field"] for c in v3["changes"]} == {"cron", "payload"}
    # If-Match: a stale one is a 412 and writes nothing.
    stale = await client.post(
        f"{URL}{sid}/versions/2/restore", headers={**auth(), "If-Match": '"2"'}
    )
    assert stale.status_code == 412
    assert (await versions(client, sid))["items"][0]["version"] == 3
    fresh = await client.post(
        f"{URL}{sid}/versions/2/restore", headers={**auth(), "If-Match": '"3"'}
    )
    assert (fresh.status_code, fresh.json()["cron"]) == (200, "*/10 * * * *")
    assert (await client.post(f"{URL}{sid}/versions/9/restore", headers=auth())).status_code == 404


async def test_another_tenant_sees_no_versions(client: httpx.AsyncClient) -> None:
    sid = (await create(client))["id"]
    other = auth("tenant-b")
    for r in (
        await client.get(f"{URL}{sid}/versions", headers=other),
        await client.get(f"{URL}{sid}/versions/1", headers=other),
        await client.post(f"{URL}{sid}/versions/1/restore", headers=other),
    ):
        assert r.status_code == 404, r.text
    assert (await client.get(f"{URL}sch_nothing/versions", headers=auth())).status_code == 404


async def test_secret_rotation_and_a_supplied_secret_show_the_field_never_the_value(
    client: httpx.AsyncClient, container: Container
) -> None:
    s = await create(client)
    sid = s["id"]
    rotated = await client.post(f"{URL}{sid}/secret/rotate", headers=auth())
    assert rotated.status_code == 200
    supplied = "whsec_" + "c3VwcGxpZWQtc2VjcmV0LXN1cHBsaWVkLXNlY3JldA=="
    put = await client.put(
        "/v1/schedules/by-key/billing",
        json={**schedule_body(), "secret": supplied},
        headers=auth(),
    )
    assert put.status_code == 201
    put_id = put.json()["id"]
    other = "whsec_" + "YW5vdGhlci1zZWNyZXQtYW5vdGhlci1zZWNyZXQtMDA="
    again = await client.put(
        "/v1/schedules/by-key/billing", json={**schedule_body(), "secret": other}, headers=auth()
    )
    assert again.status_code == 200
    (item, _) = (await versions(client, sid))["items"]
    assert item["changes"] == [{"field": "secret"}]
    (put_item, _) = (await versions(client, put_id))["items"]
    assert put_item["changes"] == [{"field": "secret"}]
    secrets = (s["secret"], rotated.json()["secret"], supplied, other)
    texts = [(await client.get(f"{URL}{i}/versions", headers=auth())).text for i in (sid, put_id)]
    texts += [
        (await client.get(f"{URL}{i}/versions/{n}", headers=auth())).text
        for i in (sid, put_id)
        for n in (1, 2)
    ]
    stored = json.dumps([await version_rows(container, i) for i in (sid, put_id)], default=str)
    for secret in secrets:
        assert secret.removeprefix("whsec_") not in stored
        for text in texts:
            assert secret.removeprefix("whsec_") not in text


async def test_a_refused_update_writes_no_version(
    client: httpx.AsyncClient, container: Container
) -> None:
    sid = (await create(client))["id"]
    bad = await client.patch(URL + sid, json={"cron": "not a cron"}, headers=auth())
    assert bad.status_code == 422
    stale = await client.patch(URL + sid, json={"name": "x"}, headers={**auth(), "If-Match": '"7"'})
    assert stale.status_code == 412
    assert [r["version"] for r in await version_rows(container, sid)] == [1]


async def test_a_version_is_written_in_the_transaction_of_its_change(
    client: httpx.AsyncClient, container: Container, clock: StepClock
) -> None:
    """The repository writes the version with the row: a unit of work left without commit
    (any error after the save) leaves neither."""
    sid = (await create(client))["id"]
    async with container.uow_factory(Actor("mallory", Source.API)) as uow:
        schedule = await uow.schedules.get("tenant-a", sid)
        assert schedule is not None
        await pause(uow, schedule, "never committed", clock())
        assert [r["version"] for r in await version_rows_in(uow, sid)] == [1, 2]
    assert [r["version"] for r in await version_rows(container, sid)] == [1]
    assert (await client.get(URL + sid, headers=auth())).json()["version"] == 1


async def test_delete_writes_a_last_version_still_readable_and_restore_is_404(
    client: httpx.AsyncClient, clock: StepClock
) -> None:
    sid = (await create(client))["id"]
    assert (await client.delete(URL + sid, headers=as_user("erin"))).status_code == 204
    items = (await versions(client, sid))["items"]
    assert (items[0]["version"], items[0]["actor"]) == (2, "erin")
    assert items[0]["changes"] == [{"field": "state", "from": "active", "to": "deleted"}]
    assert (await client.get(f"{URL}{sid}/versions/2", headers=auth())).json()["state"] == "deleted"
    restore = await client.post(f"{URL}{sid}/versions/1/restore", headers=auth())
    assert restore.status_code == 404


async def test_versions_page_newest_first_with_a_cursor(client: httpx.AsyncClient) -> None:
    sid = (await create(client))["id"]
    for n in range(4):
        await client.patch(URL + sid, json={"payload": {"n": n}}, headers=auth())
    first = await versions(client, sid, limit=2)
    assert [i["version"] for i in first["items"]] == [5, 4]
    second = await versions(client, sid, limit=2, cursor=first["next_cursor"])
    third = await versions(client, sid, limit=2, cursor=second["next_cursor"])
    assert [i["version"] for i in second["items"]] == [3, 2]
    assert ([i["version"] for i in third["items"]], third["next_cursor"]) == ([1], None)
    for forged in ("nope", encode_cursor(datetime.now(UTC), "9" * 40)):
        bad = await client.get(f"{URL}{sid}/versions", params={"cursor": forged}, headers=auth())
        assert bad.status_code == 400, bad.text
