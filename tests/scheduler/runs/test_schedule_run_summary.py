"""A schedule's `last_run`, `next_occurrence_at` and `consecutive_failures` (GET one and the
list): runs are planned ahead, so the last finished run and the next one not yet run are not the
newest run and `next_run_at`; a breaker-paused schedule shows the failure that paused it; the
list reads them for its whole page in a fixed number of statements."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import sqlalchemy as sa

import webhookdeliver as wd
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.service_layer.planning_service import PlanningSettings, plan_due
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import make_dispatcher, step
from tests.scheduler.runs.receiver import Receiver

# The service's default horizon: an every-minute schedule always has its next run planned.
AHEAD = PlanningSettings(lookahead=timedelta(seconds=60))


async def test_every_minute_after_a_success_last_is_it_and_next_is_the_next_minute(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/ok"))  # "* * * * *", created 09:00:30
    dispatcher = make_dispatcher(container, uows, deliverer)
    mclock.set(mclock().replace(minute=1, second=0))
    await plan_due(uows, now=mclock(), settings=AHEAD)  # plans 09:01 and 09:02
    assert await step(dispatcher) == 1  # 09:01 is due; 09:02 waits, pending
    mclock.advance(seconds=5)

    one = (await client.get(f"/v1/schedules/{s.id}", headers=auth())).json()
    assert one["last_run"]["status"] == "succeeded"
    assert one["last_run"]["scheduled_for"] == "2026-03-02T09:01:00Z"
    assert one["last_run"]["status_code"] == 200
    assert one["last_run"]["error"] is None
    assert one["last_run"]["attempt_count"] == 1
    assert one["next_occurrence_at"] == "2026-03-02T09:02:00Z"
    assert one["next_run_at"] == "2026-03-02T09:03:00Z"  # not yet planned: unchanged contract
    assert one["consecutive_failures"] == 0
    listed = (await client.get("/v1/schedules/", headers=auth())).json()["items"]
    assert [(i["last_run"]["id"], i["next_occurrence_at"]) for i in listed] == [
        (one["last_run"]["id"], "2026-03-02T09:02:00Z")
    ]
    # The stats' last_run is the newest run, the pending one planned ahead: not "last".
    stats = (await client.get(f"/v1/schedules/{s.id}/runs/stats", headers=auth())).json()
    assert stats["last_run"]["status"] == "pending"

    # Another tenant sees none of it.
    assert (await client.get(f"/v1/schedules/{s.id}", headers=auth("tenant-b"))).status_code == 404
    theirs = await client.get("/v1/schedules/", headers=auth("tenant-b"))
    assert theirs.json()["items"] == []


async def test_a_schedule_without_runs(
    client: httpx.AsyncClient, container: Container, receiver: Receiver
) -> None:
    s = await add_schedule(container, receiver.url("/ok"))
    one = (await client.get(f"/v1/schedules/{s.id}", headers=auth())).json()
    assert one["last_run"] is None
    assert one["next_occurrence_at"] == one["next_run_at"] == "2026-03-02T09:01:00Z"


async def test_breaker_paused_shows_the_failure_and_no_next_occurrence(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    s = await add_schedule(container, receiver.url("/fail"), max_attempts=1, threshold=2)
    dispatcher = make_dispatcher(container, uows, deliverer)
    mclock.set(mclock().replace(minute=1, second=0))
    await plan_due(uows, now=mclock(), settings=AHEAD)  # 09:01 due, 09:02 planned ahead
    await step(dispatcher)
    mclock.set(mclock().replace(minute=2, second=0))
    await step(dispatcher)  # the second failure in a row: the breaker pauses it
    mclock.advance(seconds=1)
    await plan_due(uows, now=mclock(), settings=AHEAD)  # paused: nothing planned

    one = (await client.get(f"/v1/schedules/{s.id}", headers=auth())).json()
    assert (one["state"], one["paused_reason"]) == ("paused", "breaker")
    assert one["consecutive_failures"] == 2
    last = one["last_run"]
    assert last["status"] == "failed"
    assert last["scheduled_for"] == "2026-03-02T09:02:00Z"
    assert last["status_code"] == 500
    assert last["error"]["kind"] == "http_status"
    assert last["response_excerpt"]
    assert one["next_occurrence_at"] is None

    # Resuming: the count starts afresh and a next occurrence is back.
    resumed = (await client.post(f"/v1/schedules/{s.id}/resume", headers=auth())).json()
    assert resumed["consecutive_failures"] == 0
    assert resumed["last_run"]["id"] == last["id"]
    assert resumed["next_occurrence_at"] is not None


async def test_the_list_reads_a_page_of_summaries_in_a_fixed_number_of_statements(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    for i in range(2):
        await add_schedule(container, receiver.url("/ok"), name=f"s{i}")
    dispatcher = make_dispatcher(container, uows, deliverer)
    mclock.set(mclock().replace(minute=1, second=0))
    await plan_due(uows, now=mclock(), settings=AHEAD)
    await step(dispatcher)

    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    async def listed() -> tuple[int, list[dict[str, Any]]]:
        statements.clear()
        sa.event.listen(container.engine.sync_engine, "before_cursor_execute", count)
        try:
            r = await client.get("/v1/schedules/?limit=100", headers=auth())
        finally:
            sa.event.remove(container.engine.sync_engine, "before_cursor_execute", count)
        return len(statements), r.json()["items"]

    few, items = await listed()
    assert len(items) == 2
    assert all(i["last_run"]["status"] == "succeeded" for i in items)
    for i in range(2, 12):
        await add_schedule(container, receiver.url("/ok"), name=f"s{i}")
    mclock.set(mclock().replace(minute=2, second=0))
    await plan_due(uows, now=mclock(), settings=AHEAD)
    await step(dispatcher)
    many, items = await listed()
    assert len(items) == 12
    assert sum(i["last_run"] is not None for i in items) == 12
    assert many == few, statements
