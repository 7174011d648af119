"""A replay names the run it replays (`replay_of`, migration 0012), in the replay's answer, the
run and the lists; a runs list shows each run's newest attempt (`last_status_code`,
`last_error`), read for the whole page in one query, not one per run."""

from __future__ import annotations

from typing import Any

import httpx
import sqlalchemy as sa

import webhookdeliver as wd
from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import current_revision, downgrade, head_revision, upgrade
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import make_dispatcher, step
from tests.scheduler.runs.receiver import Receiver

ALL = "/v1/schedules/-/runs"


async def test_replay_points_back_and_lists_carry_the_last_error(
    client: httpx.AsyncClient,
    container: Container,
    uows: SqlUnitOfWorkFactory,
    mclock: ManualClock,
    receiver: Receiver,
    deliverer: wd.Deliverer,
) -> None:
    failing = await add_schedule(container, receiver.url("/fail"), max_attempts=1, threshold=100)
    ok = await add_schedule(container, receiver.url("/ok"), name="ok")
    failed_run = (await client.post(f"/v1/schedules/{failing.id}/trigger", headers=auth())).json()
    mclock.advance(seconds=10)
    ok_run = (await client.post(f"/v1/schedules/{ok.id}/trigger", headers=auth())).json()
    assert failed_run["replay_of"] is None
    await step(make_dispatcher(container, uows, deliverer))

    mclock.advance(seconds=10)
    replay = await client.post(
        f"/v1/schedules/{failing.id}/runs/{failed_run['id']}/replay", headers=auth()
    )
    assert replay.status_code == 202, replay.text
    assert replay.json()["replay_of"] == failed_run["id"]
    one = await client.get(f"/v1/schedules/{failing.id}/runs/{replay.json()['id']}", headers=auth())
    assert one.json()["replay_of"] == failed_run["id"]

    statements: list[str] = []

    def capture(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if "delivery_attempts" in statement:
            statements.append(statement)

    sa.event.listen(container.engine.sync_engine, "before_cursor_execute", capture)
    try:
        page = (await client.get(ALL, headers=auth())).json()["items"]
    finally:
        sa.event.remove(container.engine.sync_engine, "before_cursor_execute", capture)
    assert len(statements) == 1  # one read of attempts for the page
    by_id = {i["id"]: i for i in page}
    assert by_id[replay.json()["id"]]["replay_of"] == failed_run["id"]
    assert by_id[replay.json()["id"]]["last_error"] is None  # not attempted yet
    failed = by_id[failed_run["id"]]
    assert failed["status"] == "failed"
    assert failed["last_status_code"] == 500
    assert failed["last_error"]["kind"] == "http_status"
    done = by_id[ok_run["id"]]
    assert (done["last_status_code"], done["last_error"]) == (200, None)
    # One schedule's list carries the same fields.
    own = await client.get(f"/v1/schedules/{failing.id}/runs", headers=auth())
    assert {i["id"]: i["last_status_code"] for i in own.json()["items"]}[failed_run["id"]] == 500


async def _columns(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            found = await conn.run_sync(lambda c: sa.inspect(c).get_columns("runs"))
    finally:
        await engine.dispose()
    return {c["name"] for c in found}


async def test_the_column_comes_and_goes_with_the_migration(empty_url: str) -> None:
    await upgrade(empty_url)
    assert "replay_of" in await _columns(empty_url)
    await downgrade(empty_url, "0011")
    assert await current_revision(empty_url) == "0011"
    assert "replay_of" not in await _columns(empty_url)
    await upgrade(empty_url)
    assert await current_revision(empty_url) == head_revision()
    assert "replay_of" in await _columns(empty_url)
