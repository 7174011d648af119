"""The runs API over HTTP (ASGI): trigger, history with filters and cursor, one run with its
attempts in order, replay, dead letters, tenant isolation; /openapi.json lists each route once."""

from __future__ import annotations

from datetime import datetime

import httpx

import webhookdeliver as wd
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import make_dispatcher, step
from tests.scheduler.runs.receiver import Receiver


async def test_trigger_then_history_then_detail_then_replay(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/flaky/1"), payload={"n": 1})
    r = await client.post(f"/v1/schedules/{s.id}/trigger", headers=auth())
    assert r.status_code == 202, r.text
    run = r.json()
    assert set(run) == {
        "id",
        "schedule_id",
        "scheduled_for",
        "due_at",
        "trigger",
        "status",
        "skip_reason",
        "attempt_count",
        "next_attempt_at",
        "started_at",
        "finished_at",
        "replay_of",
        "schedule_version",
        "completion_deadline",
        "completed_at",
        "completion_detail",
        "completion_output",
        "too_fast",
    }
    assert (run["trigger"], run["status"], run["attempt_count"]) == ("manual", "pending", 0)
    assert datetime.fromisoformat(run["scheduled_for"]) == mclock()  # RFC 3339, explicit UTC
    assert run["due_at"] == run["scheduled_for"]  # a manual run has no jitter

    d = make_dispatcher(container, uows, deliverer)
    await step(d)  # first attempt: 500
    mclock.advance(seconds=60)
    await step(d)  # second: 200
    got = (await client.get(f"/v1/schedules/{s.id}/runs/{run['id']}", headers=auth())).json()
    assert (got["status"], got["attempt_count"]) == ("succeeded", 2)
    assert [a["number"] for a in got["attempts"]] == [1, 2]
    first, second = got["attempts"]
    assert first["status_code"] == 500
    assert first["error"] == {"kind": "http_status", "message": "HTTP 500"}
    assert first["response_excerpt"] == "nope"
    assert (second["status_code"], second["error"]) == (200, None)

    r = await client.post(f"/v1/schedules/{s.id}/runs/{run['id']}/replay", headers=auth())
    assert r.status_code == 202
    replay = r.json()
    assert replay["trigger"] == "replay"
    assert replay["id"] != run["id"]
    mclock.advance(seconds=1)
    await step(d)
    bodies = {s.headers["X-Webhook-Id"]: s.body for s in receiver.requests}
    assert bodies[replay["id"]] == bodies[run["id"]] == b'{"n":1}'  # the same payload


async def test_history_filters_cursor_and_dead_letters(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/fail"), max_attempts=1, threshold=100)
    ids = []
    for _ in range(5):
        mclock.advance(seconds=10)
        r = await client.post(f"/v1/schedules/{s.id}/trigger", headers=auth())
        ids.append(r.json()["id"])
    d = make_dispatcher(container, uows, deliverer)
    await step(d)
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = (
            await client.get(f"/v1/schedules/{s.id}/runs", params=params, headers=auth())
        ).json()
        seen += [i["id"] for i in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))  # newest first, no repeats, nothing missing
    dead = await client.get(f"/v1/schedules/{s.id}/runs?status=failed", headers=auth())
    assert len(dead.json()["items"]) == 5
    none = await client.get(f"/v1/schedules/{s.id}/runs?status=succeeded", headers=auth())
    assert none.json()["items"] == []
    # from/to select by scheduled_for: [2nd, 4th).
    first = (await client.get(f"/v1/schedules/{s.id}/runs/{ids[1]}", headers=auth())).json()
    fourth = (await client.get(f"/v1/schedules/{s.id}/runs/{ids[3]}", headers=auth())).json()
    window = await client.get(
        f"/v1/schedules/{s.id}/runs",
        params={"from": first["scheduled_for"], "to": fourth["scheduled_for"]},
        headers=auth(),
    )
    assert [i["id"] for i in window.json()["items"]] == [ids[2], ids[1]]


async def test_other_tenants_see_404_everywhere(
    client: httpx.AsyncClient, container: Container
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/ok")
    run = (await client.post(f"/v1/schedules/{s.id}/trigger", headers=auth())).json()
    other = auth("tenant-b")
    for method, path in [
        ("POST", f"/v1/schedules/{s.id}/trigger"),
        ("GET", f"/v1/schedules/{s.id}/runs"),
        ("GET", f"/v1/schedules/{s.id}/runs/{run['id']}"),
        ("POST", f"/v1/schedules/{s.id}/runs/{run['id']}/replay"),
    ]:
        r = await client.request(method, path, headers=other)
        assert r.status_code == 404, (method, path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    missing = await client.get(f"/v1/schedules/{s.id}/runs/run_nope", headers=auth())
    assert missing.status_code == 404


async def test_scopes_and_tokens(client: httpx.AsyncClient, container: Container) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/ok")
    r = await client.post(f"/v1/schedules/{s.id}/trigger")
    assert r.status_code == 401
    r = await client.post(f"/v1/schedules/{s.id}/trigger", headers=auth(scopes=("schedules:read",)))
    assert r.status_code == 403
    r = await client.get(f"/v1/schedules/{s.id}/runs?status=bogus", headers=auth())
    assert r.status_code == 422


async def test_the_client_serves_the_app_as_deployed_with_each_route_once(
    client: httpx.AsyncClient,
) -> None:
    # The fixture's app is app_from_container's: runs routes mounted once (a second mount
    # duplicated every operation id and broke /openapi.json).
    r = await client.get("/openapi.json")
    assert r.status_code == 200, r.text
    ops = [op["operationId"] for path in r.json()["paths"].values() for op in path.values()]
    assert len(ops) == len(set(ops))
    assert "/v1/schedules/{schedule_id}/trigger" in r.json()["paths"]
