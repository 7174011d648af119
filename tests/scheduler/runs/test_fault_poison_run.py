"""Fault proof on PostgreSQL with real worker subprocesses (DESIGN.md §6, poison runs): a run
whose every attempt takes its worker down (here: the receiver never answers and the worker is
SIGKILLed mid-delivery) is attempted SCHEDULER_MAX_LEASE_EXPIRIES times, once per worker, and
then the next worker fails it `worker_lost` instead of claiming it again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from scheduler.adapters.db.tables import outbox
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container, utc_now
from scheduler.domain.run import RunStatus
from scheduler.service_layer.runs import get_run, trigger_run
from tests.scheduler.runs.conftest import add_schedule
from tests.scheduler.runs.dispatch_helpers import rows, schedule_row
from tests.scheduler.runs.processes import WorkerProcess, wait_until, worker_env
from tests.scheduler.runs.receiver import Receiver
from tests.support.processes import equals

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

LIMIT = 3  # SCHEDULER_MAX_LEASE_EXPIRIES for the workers
LEASE = "3"  # seconds: each dead worker's claim frees up quickly
WAIT = 30.0  # seconds per step; generous for a loaded 2-core machine


async def test_a_run_that_kills_every_worker_fails_worker_lost_after_the_limit(
    real: Container, pg_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    uows = SqlUnitOfWorkFactory(real.engine, real.secret_box)
    # max_attempts well above the limit, so the limit (not the retry policy) ends it; a yearly
    # cron, so only the manual run exists; threshold 1: the breaker must count this failure.
    s = await add_schedule(
        real,
        receiver.url("/hang"),
        name="poison",
        cron="0 0 1 1 *",
        max_attempts=10,
        timeout_seconds=30,
        threshold=1,
    )
    run = await trigger_run(uows, tenant_id="tenant-a", schedule_id=s.id, clock=utc_now)
    env = worker_env(pg_url, SCHEDULER_MAX_LEASE_EXPIRIES=str(LIMIT))
    # No relay: the run's events stay in the outbox to be read here.
    args = ("--lease", LEASE, "--no-relay")

    def seen() -> list[str]:
        return [
            r.headers["X-Attempt"] for r in receiver.requests if r.headers["X-Webhook-Id"] == run.id
        ]

    for n in range(1, LIMIT + 1):  # each worker claims it (after the last one's lease), dies
        w = await WorkerProcess(pg_url, tmp_path, *args, env=env).start()
        try:
            await wait_until(lambda: len(seen()) == n, WAIT, f"attempt {n} sent")
            w.kill()  # mid-delivery: the receiver holds the request, nothing is recorded
            await w.wait()
        finally:
            await w.aclose()
    assert seen() == [str(n) for n in range(1, LIMIT + 1)]

    async def status() -> RunStatus:
        detail = await get_run(uows, tenant_id="tenant-a", schedule_id=s.id, run_id=run.id)
        return detail.run.status

    last = await WorkerProcess(pg_url, tmp_path, *args, env=env).start()
    try:
        await wait_until(
            lambda: equals(status(), RunStatus.FAILED), WAIT, "the run failed after the limit"
        )
        await asyncio.sleep(float(LEASE) + 2)  # longer than a lease: nobody attempts it again
        assert await status() is RunStatus.FAILED
        last.terminate()
        assert await last.wait() == 0
    finally:
        await last.aclose()

    assert seen() == [str(n) for n in range(1, LIMIT + 1)]  # no attempt LIMIT + 1 went out
    detail = await get_run(uows, tenant_id="tenant-a", schedule_id=s.id, run_id=run.id)
    assert (detail.run.attempt_count, detail.run.lease_owner) == (LIMIT, None)
    got = [(a.number, a.error_kind, a.status_code) for a in detail.attempts]
    assert got == [(n, "worker_lost", None) for n in range(1, LIMIT + 1)]
    failed = [
        json.loads(r.payload)
        for r in await rows(real, outbox, outbox.c.type == "schedule.run.failed")
    ]
    assert [(e["run_id"], e["data"]["last_error"]["kind"]) for e in failed] == [
        (run.id, "worker_lost")
    ]
    assert f"expired {LIMIT} times" in failed[0]["data"]["last_error"]["message"]
    assert (await schedule_row(real, s.id)).paused_reason == "breaker"  # the failure counted
