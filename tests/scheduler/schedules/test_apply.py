"""`POST /v1/schedules/apply` (DESIGN.md §7b): the plan (created, updated with its fields,
unchanged, deleted), a dry run that writes nothing, a re-apply that writes nothing, one 422
naming every wrong definition with nothing written, prune by labels (never a keyless schedule),
secrets shown once, and other tenants untouched. On SQLite and PostgreSQL."""

from __future__ import annotations

import base64

import httpx
import pytest
import sqlalchemy as sa

from scheduler.bootstrap import Container
from tests.scheduler.conftest import auth
from tests.scheduler.schedules.apply_support import apply, definition, live, state
from tests.scheduler.schedules.conftest import schedule_body

SUPPLIED = "whsec_" + base64.b64encode(b"s" * 32).decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"o" * 32).decode()


async def test_first_apply_creates_then_reapply_writes_nothing(
    client: httpx.AsyncClient, container: Container
) -> None:
    defs = [definition("billing/a"), definition("billing/b", action="event", target=None)]
    first = await apply(client, defs)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["dry_run"] is False
    assert body["created"] == ["billing/a", "billing/b"]
    assert (body["updated"], body["unchanged"], body["deleted"]) == ([], 0, [])
    # A generated secret is shown for the webhook only (an event schedule has none).
    assert list(body["secrets"]) == ["billing/a"]
    assert body["secrets"]["billing/a"].startswith("whsec_")
    schedules = await live(client)
    assert set(schedules) == {"billing/a", "billing/b"}
    assert schedules["billing/a"]["next_run_at"] is not None

    before = await state(container)
    again = await apply(client, defs)
    assert again.status_code == 200, again.text
    assert again.json() == {
        "dry_run": False,
        "created": [],
        "updated": [],
        "unchanged": 2,
        "deleted": [],
        "secrets": {},
    }
    # No row written: same rows, versions, updated_at, and no event.
    assert await state(container) == before


async def test_update_names_its_fields_and_goes_the_patch_way(
    client: httpx.AsyncClient, container: Container
) -> None:
    await apply(client, [definition("k1"), definition("k2"), definition("k3")])
    before = await live(client)
    changed = [
        definition("k1", payload={"report": "weekly"}, labels={"team": "x"}),
        definition("k2", cron="30 4 * * *"),
        definition("k3"),
    ]
    r = await apply(client, changed)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["created"] == []
    assert body["updated"] == [
        {"key": "k1", "fields": ["labels", "payload"]},
        {"key": "k2", "fields": ["cron"]},
    ]
    assert body["unchanged"] == 1
    after = await live(client)
    assert after["k1"]["payload"] == {"report": "weekly"}
    assert after["k1"]["version"] == before["k1"]["version"] + 1
    assert after["k2"]["cron"] == "30 4 * * *"
    assert after["k2"]["next_run_at"] != before["k2"]["next_run_at"]  # re-planned from now
    assert after["k3"]["version"] == before["k3"]["version"]
    assert after["k3"]["updated_at"] == before["k3"]["updated_at"]
    async with container.engine.connect() as conn:
        rows = (
            await conn.execute(
                sa.text(
                    "SELECT type, payload FROM outbox WHERE type = 'schedule.updated' ORDER BY id"
                )
            )
        ).all()
    assert len(rows) == 2  # one event per updated schedule, none for the unchanged one


async def test_dry_run_answers_the_plan_and_writes_nothing(
    client: httpx.AsyncClient, container: Container
) -> None:
    await apply(
        client, [definition("keep"), definition("edit"), definition("old", labels={"a": "b"})]
    )
    before = await state(container)
    r = await apply(
        client,
        [definition("keep"), definition("edit", name="renamed"), definition("new")],
        prune={"a": "b"},
        dry_run=True,
    )
    assert r.status_code == 200, r.text
    assert r.json() == {
        "dry_run": True,
        "created": ["new"],
        "updated": [{"key": "edit", "fields": ["name"]}],
        "unchanged": 1,
        "deleted": ["old"],
        "secrets": {},  # never on a dry run
    }
    assert await state(container) == before
    # The same call for real does what the dry run said.
    real = await apply(
        client,
        [definition("keep"), definition("edit", name="renamed"), definition("new")],
        prune={"a": "b"},
    )
    assert {k: v for k, v in real.json().items() if k not in {"dry_run", "secrets"}} == {
        k: v for k, v in r.json().items() if k not in {"dry_run", "secrets"}
    }
    assert set(await live(client)) == {"keep", "edit", "new"}


async def test_invalid_definitions_are_one_422_naming_each_index_and_nothing_is_written(
    client: httpx.AsyncClient, container: Container
) -> None:
    await apply(client, [definition("exists")])
    before = await state(container)
    r = await apply(
        client,
        [
            definition("fine-1"),
            definition("bad-cron", cron="61 * * * *"),
            definition("exists", timezone="Mars/Olympus"),
            definition("fine-2"),
            definition("bad-target", target={"url": "http://127.0.0.1/hook"}),
            definition("bad-secret", action="event", target=None, secret=SUPPLIED),
            definition("no-target", target=None),
        ],
    )
    assert r.status_code == 422, r.text
    problem = r.json()
    assert r.headers["content-type"] == "application/problem+json"
    assert problem["type"].endswith("/validation-error")
    fields = [e["field"] for e in problem["errors"]]
    assert fields == [
        "schedules[1].cron",
        "schedules[2].timezone",
        "schedules[4].target.url",
        "schedules[5].secret",
        "schedules[6].target",
    ]
    assert problem["field"] == "schedules[1].cron"
    assert SUPPLIED not in r.text
    assert await state(container) == before


async def test_shape_errors_name_the_index_and_duplicate_keys_are_refused(
    client: httpx.AsyncClient, container: Container
) -> None:
    before = await state(container)
    r = await apply(
        client, [definition("a"), {"name": "no-key", "cron": "* * * * *", "timezone": "UTC"}]
    )
    assert r.status_code == 422, r.text
    assert "schedules[1].key" in [e["field"] for e in r.json()["errors"]]
    r = await apply(client, [definition("a"), definition("b"), definition("a")])
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == [
        {"field": "schedules[2].key", "detail": "repeats schedules[0].key"}
    ]
    assert await state(container) == before


async def test_every_bad_definition_is_named_past_the_usual_twenty(
    client: httpx.AsyncClient,
) -> None:
    r = await apply(client, [definition(f"k{i}", cron="bad") for i in range(30)])
    assert r.status_code == 422, r.text
    assert [e["field"] for e in r.json()["errors"]] == [f"schedules[{i}].cron" for i in range(30)]
    # Schema errors (the request shape) too.
    r = await apply(client, [definition(f"k{i}", jitter_seconds=-1) for i in range(30)])
    assert r.status_code == 422, r.text
    assert len({e["field"] for e in r.json()["errors"]}) == 30


async def test_prune_deletes_only_keyed_schedules_with_every_label_outside_the_set(
    client: httpx.AsyncClient, container: Container
) -> None:
    owned = {"team": "billing", "env": "prod"}
    await apply(
        client,
        [
            definition("stays", labels=owned),
            definition("goes", labels=owned),
            definition("one-label", labels={"team": "billing"}),
            definition("other-team", labels={"team": "search", "env": "prod"}),
        ],
    )
    keyless = await client.post(
        "/v1/schedules/", json=schedule_body(name="keyless", labels=owned), headers=auth()
    )
    assert keyless.status_code == 201
    # Another tenant's schedule with the same key and labels.
    other = await apply(client, [definition("goes", labels=owned)], tenant="tenant-b")
    assert other.status_code == 200
    other_before = await live(client, "tenant-b")

    r = await apply(client, [definition("stays", labels=owned)], prune=owned)
    assert r.status_code == 200, r.text
    assert r.json()["deleted"] == ["goes"]
    assert r.json()["unchanged"] == 1
    remaining = await live(client)
    assert set(remaining) == {"stays", "one-label", "other-team", keyless.json()["id"]}
    assert await live(client, "tenant-b") == other_before
    async with container.engine.connect() as conn:
        deleted = (
            await conn.execute(
                sa.text("SELECT count(*) FROM outbox WHERE type = 'schedule.deleted'")
            )
        ).scalar_one()
    assert deleted == 1
    # Deleted the normal way: its key is free again, and a re-apply creates it anew.
    again = await apply(client, [definition("goes", labels=owned)])
    assert again.json()["created"] == ["goes"]


async def test_an_empty_prune_selector_is_refused(client: httpx.AsyncClient) -> None:
    r = await apply(client, [definition("a")], prune={})
    assert r.status_code == 422
    assert r.json()["field"] == "prune.labels"


async def test_secrets_shown_once_for_created_never_for_supplied_and_compared(
    client: httpx.AsyncClient, container: Container
) -> None:
    r = await apply(client, [definition("gen"), definition("own", secret=SUPPLIED)])
    assert r.status_code == 200, r.text
    assert list(r.json()["secrets"]) == ["gen"]
    assert SUPPLIED not in r.text
    # The same supplied secret again is unchanged; another one is a change named `secret`.
    before = await state(container)
    same = await apply(client, [definition("gen"), definition("own", secret=SUPPLIED)])
    assert same.json()["unchanged"] == 2
    assert await state(container) == before
    changed = await apply(client, [definition("gen"), definition("own", secret=OTHER_SECRET)])
    assert changed.json()["updated"] == [{"key": "own", "fields": ["secret"]}]
    assert OTHER_SECRET not in changed.text
    assert changed.json()["secrets"] == {}
    schedule_id = (await live(client))["own"]["id"]
    async with container.uow_factory() as uow:
        stored = await uow.schedules.secrets("tenant-a", schedule_id, container.clock())
    assert stored == [OTHER_SECRET]


@pytest.mark.parametrize("limit", [3])
async def test_quota_is_checked_for_the_final_set(
    database_url: str, clock: object, limit: int
) -> None:
    from asgi_lifespan import LifespanManager

    from scheduler.entrypoints.api.app import app_from_container
    from tests.scheduler.schedules.conftest import make_container

    container = make_container(database_url, clock, default_max_schedules=limit)  # type: ignore[arg-type]
    app = app_from_container(container)
    try:
        async with LifespanManager(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                at_limit = [definition(f"k{i}", labels={"set": "x"}) for i in range(limit)]
                assert (await apply(client, at_limit)).status_code == 200
                before = await state(container)
                # One more is refused as a whole: nothing written.
                over = await apply(client, [*at_limit, definition("extra", labels={"set": "x"})])
                assert over.status_code == 403, over.text
                assert over.json()["type"].endswith("/quota-exceeded")
                assert (over.json()["limit"], over.json()["current"]) == ("max_schedules", 4)
                assert await state(container) == before
                # Pruning one and creating one in the same apply stays at the limit: allowed.
                swap = [*at_limit[1:], definition("extra", labels={"set": "x"})]
                r = await apply(client, swap, prune={"set": "x"})
                assert r.status_code == 200, r.text
                assert (r.json()["created"], r.json()["deleted"]) == (["extra"], ["k0"])
    finally:
        await container.aclose()


async def test_per_definition_limits_are_checked_as_create_checks_them(
    database_url: str, clock: object
) -> None:
    from asgi_lifespan import LifespanManager

    from scheduler.entrypoints.api.app import app_from_container
    from tests.scheduler.schedules.conftest import make_container

    container = make_container(database_url, clock, default_min_interval_seconds=3600)  # type: ignore[arg-type]
    app = app_from_container(container)
    try:
        async with LifespanManager(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                r = await apply(
                    client, [definition("hourly"), definition("often", cron="*/5 * * * *")]
                )
                assert r.status_code == 403, r.text
                assert r.json()["limit"] == "min_interval_seconds"
                assert r.json()["field"] == "schedules[1]"
                assert await live(client) == {}
    finally:
        await container.aclose()


async def test_a_keyed_schedule_made_one_at_a_time_is_adopted_by_apply(
    client: httpx.AsyncClient,
) -> None:
    made = await client.post("/v1/schedules/", json=definition("adopt"), headers=auth())
    assert made.status_code == 201
    r = await apply(client, [definition("adopt")])
    assert r.json()["unchanged"] == 1
    assert (await live(client))["adopt"]["id"] == made.json()["id"]
