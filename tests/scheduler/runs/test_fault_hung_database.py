"""Fault proof: a hung database (the link stays open and goes silent) for 30 s mid-delivery.

Real processes on PostgreSQL: a worker (`python -m scheduler.entrypoints.workers`) and an API
(`scheduler serve --role api`) reach the shared server only through a loopback `TcpProxy`,
which is silenced (connections open, no byte forwarded) for `SILENCE_SECONDS` while every-minute
schedules and manual triggers keep deliveries going to a loopback receiver. The processes run
with short database bounds and step timeout (environment), so:

- the worker's /readyz turns 503 naming its overdue loops within the step timeout plus a poll;
- an API request during the hang ends with 503 problem+json and Retry-After within its bounds;
- once the link forwards again the worker recovers by itself within 10 s (a new delivery), and
  afterwards every occurrence has exactly one run and none is lost (FIRE_ALL).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from scheduler.adapters.db.tables import runs, schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container, utc_now
from scheduler.domain.policies import MisfirePolicy
from scheduler.service_layer.runs import trigger_run
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import add_schedule, make_container
from tests.scheduler.runs.processes import WorkerProcess, wait_until, worker_env
from tests.scheduler.runs.receiver import Receiver
from tests.support.processes import ServiceProcess, equals
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

STEP_TIMEOUT_SECONDS = 5.0
BOUNDS = {
    "SCHEDULER_DB_CONNECT_TIMEOUT_SECONDS": "2",
    "SCHEDULER_DB_COMMAND_TIMEOUT_SECONDS": "3",
    "SCHEDULER_DB_STATEMENT_TIMEOUT_SECONDS": "2",
    "SCHEDULER_DB_POOL_TIMEOUT_SECONDS": "3",
    "SCHEDULER_WORKER_STEP_TIMEOUT_SECONDS": str(STEP_TIMEOUT_SECONDS),
}
SILENCE_SECONDS = 30.0
# The watchdog's bound (one step timeout past the longest idle wait of the planner and the
# dispatcher, 1 s) plus slack for a loaded 2-core machine.
READY_BOUND_SECONDS = STEP_TIMEOUT_SECONDS + 1.0 + 6.0
# An API request: a stale pooled connection's ping (3 s), a new connect (2 s), slack.
API_BOUND_SECONDS = 12.0
RECOVERY_BOUND_SECONDS = 10.0
SCHEDULES = 8


async def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    """(status, JSON body or None, headers) of GET `url`; the client gives up after 30 s."""
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as s, s.get(url, headers=headers) as r:
        body = await r.json(content_type=None) if r.content_length != 0 else None
        return r.status, body, dict(r.headers)


async def backdate(c: Container, minutes: int) -> datetime:
    start = (utc_now() - timedelta(minutes=minutes)).replace(second=0, microsecond=0)
    async with c.engine.begin() as conn:
        await conn.execute(sa.update(schedules).values(next_run_at=start))
    return start


async def all_done(c: Container) -> bool:
    """Every run due by now is finished."""
    async with c.engine.connect() as conn:
        open_ = (
            await conn.execute(
                sa.select(sa.func.count())
                .select_from(runs)
                .where(
                    sa.or_(
                        runs.c.status == "in_progress",
                        sa.and_(
                            runs.c.status.in_(["pending", "retrying"]),
                            runs.c.next_attempt_at <= utc_now(),
                        ),
                    )
                )
            )
        ).scalar_one()
    return open_ == 0


async def test_hung_database_readyz_503_api_503_and_recovery_without_loss(
    pg_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    direct = make_container(pg_url, utc_now)  # the test's own view, never through the proxy
    uows = SqlUnitOfWorkFactory(direct.engine, direct.secret_box)
    proxy = TcpProxy("127.0.0.1", make_url(pg_url).port or 5432)
    await proxy.start()
    proxied = make_url(pg_url).set(host="127.0.0.1", port=proxy.port)
    env = worker_env(proxied.render_as_string(hide_password=False), **BOUNDS)
    made = [
        await add_schedule(
            direct, receiver.url("/slow/300"), name=f"m{i}", misfire=MisfirePolicy.FIRE_ALL
        )
        for i in range(SCHEDULES)
    ]
    start = await backdate(direct, 1)  # two occurrences each due at once, then one a minute
    worker = WorkerProcess("", tmp_path, "--lease", "60", env=env)
    api = ServiceProcess(
        "scheduler.entrypoints.cli",
        tmp_path,
        env=env,
        args=("serve", "--role", "api", "--port", "{port}"),
        name="api",
    )
    triggered: list[str] = []
    stop_triggering = asyncio.Event()

    async def keep_triggering() -> None:
        """A manual run every 0.5 s, written directly (the test's link never hangs)."""
        i = 0
        while not stop_triggering.is_set():
            run = await trigger_run(
                uows, tenant_id="tenant-a", schedule_id=made[i % SCHEDULES].id, clock=utc_now
            )
            triggered.append(run.id)
            i += 1
            await asyncio.sleep(0.5)  # a steady trickle of work, not a wait for an outcome

    triggers: asyncio.Task[None] | None = None
    try:
        await worker.start()
        await api.start()
        schedules_url = api.base_url + "/v1/schedules/"
        status, _, _ = await get(schedules_url, auth())
        assert status == 200  # the API's pool holds a connection through the proxy
        triggers = asyncio.create_task(keep_triggering())
        await wait_until(lambda: len(receiver.requests) >= 2 * SCHEDULES + 2, 45, "deliveries")

        proxy.silence()  # mid-delivery: /slow/300 attempts are in flight
        silenced = time.monotonic()

        async def overdue_named() -> bool:
            status, body, _ = await get(worker.base_url + "/readyz")
            return status == 503 and bool(body and body.get("overdue_loops"))

        api_call = asyncio.create_task(_timed(get(schedules_url, auth())))
        await wait_until(overdue_named, READY_BOUND_SECONDS + 10, "readyz 503 naming loops")
        ready_503_after = time.monotonic() - silenced
        (api_status, api_body, api_headers), api_seconds = await api_call
        assert api_status == 503
        assert api_body["type"].endswith("/unavailable")
        assert int(api_headers["Retry-After"]) > 0
        assert api_seconds < API_BOUND_SECONDS
        assert ready_503_after < READY_BOUND_SECONDS
        assert worker.proc is not None
        assert worker.proc.returncode is None  # alive, only waiting

        await asyncio.sleep(max(SILENCE_SECONDS - (time.monotonic() - silenced), 0))  # the hang
        seen = len(receiver.requests)
        proxy.resume()
        resumed = time.monotonic()
        await wait_until(
            lambda: len(receiver.requests) > seen, RECOVERY_BOUND_SECONDS + 20, "delivery"
        )
        recovered_after = time.monotonic() - resumed
        await wait_until(lambda: equals(worker.status("/readyz"), 200), 30, "readyz 200 again")
        status, _, _ = await get(schedules_url, auth())
        assert status == 200

        stop_triggering.set()
        await triggers
        await wait_until(lambda: all_done(direct), 45, "every due run finished")
        stopped_at = utc_now()
        worker.terminate()
        assert await worker.wait() == 0
        print(
            f"hung database: readyz 503 after {ready_503_after:.1f} s, API 503 after "
            f"{api_seconds:.1f} s, first delivery {recovered_after:.1f} s after the link came back"
        )
        assert recovered_after < RECOVERY_BOUND_SECONDS
    finally:
        stop_triggering.set()
        if triggers is not None:
            await asyncio.gather(triggers, return_exceptions=True)
        await worker.aclose()
        await api.aclose()
        await proxy.stop()

    try:
        async with direct.engine.connect() as conn:
            rows = list(await conn.execute(sa.select(runs)))
    finally:
        await direct.aclose()
    planned = [r for r in rows if r.trigger == "schedule"]
    per_occurrence = Counter((r.schedule_id, r.scheduled_for) for r in planned)
    assert set(per_occurrence.values()) == {1}  # exactly one run per occurrence
    by_schedule: dict[str, set[datetime]] = defaultdict(set)
    for r in planned:
        by_schedule[r.schedule_id].add(r.scheduled_for.astimezone(UTC))
    last_due = stopped_at.replace(second=0, microsecond=0)
    due = {
        start + timedelta(minutes=k)
        for k in range(int((last_due - start) / timedelta(minutes=1)) + 1)
    }
    assert len(due) >= 2
    for s in made:
        assert due <= by_schedule[s.id], s.definition.name  # none lost, the hang's minutes included
    finished = {r.id: r.status for r in rows if r.scheduled_for <= stopped_at}
    assert set(finished.values()) == {"succeeded"}
    assert set(triggered) <= set(receiver.attempts_by_id)  # every manual run delivered
    assert {r.id for r in planned if r.scheduled_for <= stopped_at} <= set(receiver.attempts_by_id)


async def _timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = await call
    return result, time.monotonic() - started
