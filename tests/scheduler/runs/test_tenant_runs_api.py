"""`GET /v1/schedules/-/runs`: the tenant's runs across its schedules — filters, cursor, tenant
isolation, deleted schedules, route order — and, on PostgreSQL, the plan uses its index."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

import webhookdeliver as wd
from scheduler.adapters.db.runs.reads import schedule_runs_query, tenant_runs_query
from scheduler.adapters.db.tables import runs
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.run import RunStatus
from scheduler.service_layer.run_ports import RunPageFilter
from servicekit.data.ids import new_id
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import make_dispatcher, step
from tests.scheduler.runs.receiver import Receiver

ALL = "/v1/schedules/-/runs"


async def _pages(client: httpx.AsyncClient, params: dict[str, str]) -> list[str]:
    seen: list[str] = []
    cursor = None
    for _ in range(20):
        page_params = {**params, **({"cursor": cursor} if cursor else {})}
        r = await client.get(ALL, params=page_params, headers=auth())
        assert r.status_code == 200, r.text
        seen += [i["id"] for i in r.json()["items"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("the cursor never ended")


async def test_tenant_history_across_schedules_with_filters_and_cursor(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    failing = await add_schedule(container, receiver.url("/fail"), max_attempts=1, threshold=100)
    ok = await add_schedule(container, receiver.url("/ok"), name="ok")
    other_tenant = await add_schedule(container, receiver.url("/ok"), tenant="tenant-b")
    order: list[tuple[str, str]] = []  # (schedule id, run id), oldest first
    for i in range(6):
        mclock.advance(seconds=10)
        s = failing if i % 2 == 0 else ok
        run = (await client.post(f"/v1/schedules/{s.id}/trigger", headers=auth())).json()
        order.append((s.id, run["id"]))
    await client.post(f"/v1/schedules/{other_tenant.id}/trigger", headers=auth("tenant-b"))
    await step(make_dispatcher(container, uows, deliverer))

    newest_first = [run_id for _, run_id in reversed(order)]
    # Both schedules, newest first, through a cursor: no repeats, nothing missing, no tenant-b.
    assert await _pages(client, {"limit": "2"}) == newest_first
    assert await _pages(client, {"schedule_id": ok.id}) == [
        r for s, r in reversed(order) if s == ok.id
    ]
    failed = await _pages(client, {"status": "failed"})  # dead letters across schedules
    assert failed == [r for s, r in reversed(order) if s == failing.id]
    assert await _pages(client, {"schedule_id": "sch_unknown"}) == []

    replayed = await client.post(
        f"/v1/schedules/{failing.id}/runs/{failed[0]}/replay", headers=auth()
    )
    replay_id = replayed.json()["id"]
    assert await _pages(client, {"trigger": "replay"}) == [replay_id]
    assert replay_id not in await _pages(client, {"trigger": "manual"})

    # from/to select by scheduled_for, [from, to) as per schedule: the 2nd to 4th runs.
    runs_by_id = {i["id"]: i for i in (await client.get(ALL, headers=auth())).json()["items"]}
    window = {
        "from": runs_by_id[order[1][1]]["scheduled_for"],
        "to": runs_by_id[order[4][1]]["scheduled_for"],
    }
    assert await _pages(client, window) == [order[3][1], order[2][1], order[1][1]]
    assert runs_by_id[order[0][1]]["scheduled_for"].endswith("Z")  # RFC 3339 UTC

    # tenant-b sees only its own run; a deleted schedule's runs leave the list.
    theirs = (await client.get(ALL, headers=auth("tenant-b"))).json()["items"]
    assert [i["schedule_id"] for i in theirs] == [other_tenant.id]
    assert (await client.delete(f"/v1/schedules/{ok.id}", headers=auth())).status_code == 204
    left = (await client.get(ALL, headers=auth())).json()["items"]
    assert ok.id not in {i["schedule_id"] for i in left}
    assert failing.id in {i["schedule_id"] for i in left}


async def test_bad_filters_and_scopes(client: httpx.AsyncClient) -> None:
    assert (await client.get(ALL)).status_code == 401
    for params in ({"status": "bogus"}, {"trigger": "bogus"}, {"limit": "0"}):
        r = await client.get(ALL, params=params, headers=auth())
        assert r.status_code == 422, (params, r.text)
    r = await client.get(ALL, params={"cursor": "x"}, headers=auth())
    assert (r.status_code, r.json()["field"]) == (400, "cursor"), r.text
    r = await client.get(
        ALL,
        params={"from": "2026-03-09T00:00:00Z", "to": "2026-03-08T00:00:00Z"},
        headers=auth(),
    )
    assert r.status_code == 422


@pytest.mark.postgres
async def test_tenant_history_is_read_off_the_tenant_index(
    database_url: str, container: Container
) -> None:
    """With real statistics over 48k runs of 12 tenants (8 schedules each), a page of one
    tenant's runs — first and deep behind a cursor — is read off ix_runs_tenant_scheduled,
    never by a sequential scan of runs; the deep page's index range starts at the cursor. The
    dead letters (failed-only pages, the tenant's and a schedule's), the oldest 1% behind
    thousands of succeeded runs, are read off the failed-only indexes: the rows read are the
    page's, not the history in front of it."""
    if not database_url.startswith("postgresql"):
        pytest.skip("EXPLAIN: PostgreSQL only")
    schedules = [
        await add_schedule(container, "http://127.0.0.1:9/ok", tenant=f"t{t}", name=f"s{t}-{i}")
        for t in range(12)
        for i in range(8)
    ]
    base = datetime(2026, 3, 1, tzinfo=UTC)
    rows = [
        {
            "id": new_id("run", at=base + timedelta(minutes=n)),
            "tenant_id": s.tenant_id,
            "schedule_id": s.id,
            "scheduled_for": base + timedelta(minutes=n),
            "trigger": "schedule",
            "status": "failed" if n < 5 else "succeeded",  # the oldest: behind the rest
            "attempt_count": 1,
            "created_at": base + timedelta(minutes=n),
        }
        for n in range(500)
        for s in schedules
    ]
    engine = container.engine
    async with engine.begin() as conn:
        await conn.execute(runs.insert(), rows)
    cursor = (base + timedelta(minutes=50), "run_0")
    pages = {
        "first": (RunPageFilter(), None),
        "deep": (RunPageFilter(), cursor),
    }
    failed = RunPageFilter(status=RunStatus.FAILED)
    one = next(s for s in schedules if s.tenant_id == "t7")
    dead_letters = {
        "ix_runs_tenant_failed": tenant_runs_query("t7", limit=51, before=None, filters=failed),
        "ix_runs_schedule_failed": schedule_runs_query(
            "t7", one.id, limit=51, before=None, filters=failed
        ),
    }
    async with engine.connect() as conn:
        await conn.execute(sa.text("ANALYZE runs"))
        await conn.execute(sa.text("ANALYZE schedules"))
        for name, (filters, before) in pages.items():
            query = tenant_runs_query("t7", limit=51, before=before, filters=filters)
            compiled = query.compile(engine.sync_engine, compile_kwargs={"literal_binds": True})
            plan = "\n".join((await conn.execute(sa.text(f"EXPLAIN {compiled}"))).scalars())
            assert "ix_runs_tenant_scheduled" in plan, (name, plan)
            assert "Seq Scan on runs" not in plan, (name, plan)
            if before is not None:
                assert "scheduled_for <=" in plan.split("ix_runs_tenant_scheduled", 1)[1], plan
        for index, query in dead_letters.items():
            # The predicate is a literal even in the prepared statement (a generic plan can
            # then use the partial index too).
            assert "runs.status = 'failed'" in str(query.compile(engine.sync_engine)), index
            compiled = query.compile(engine.sync_engine, compile_kwargs={"literal_binds": True})
            explain = f"EXPLAIN (ANALYZE, FORMAT JSON) {compiled}"
            (doc,) = (await conn.execute(sa.text(explain))).scalar_one()
            nodes = list(_plan_nodes(doc["Plan"]))
            on_runs = [n for n in nodes if n.get("Relation Name") == "runs"]
            used = [n["Index Name"] for n in nodes if str(n.get("Index Name")).startswith("ix_")]
            assert used == [index], (index, nodes)  # an index scan, or a bitmap of it
            assert all(n["Node Type"] != "Seq Scan" for n in on_runs), (index, nodes)
            # 40 failed runs for t7 (5 for the schedule), under 4,000 succeeded ones: reading
            # through the history index, the filter would drop those thousands.
            read = sum(n["Actual Rows"] + n.get("Rows Removed by Filter", 0) for n in on_runs)
            assert read <= 40, (index, read)
            assert nodes[0]["Actual Rows"] == (40 if "tenant" in index else 5), doc


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)
