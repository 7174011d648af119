"""Fault proof: the database unreachable for a while — the workers back off, recover, and
the occurrences missed meanwhile follow each schedule's misfire_policy (DESIGN.md §6).

PostgreSQL: an in-process WorkerRuntime with a manual clock reaches the shared server only
through a loopback TCP proxy, which is cut (the server itself is never stopped). While it is cut,
the clock jumps across several `* * * * *` occurrences, beyond the misfire grace; then the link
comes back. SQLite has no network link to cut: there the outage is the worker being down (its
runtime stopped, the clock advanced, a new runtime started), which is what misfires are for.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import runs
from scheduler.bootstrap import Container
from scheduler.domain.planning import DEFAULT_MISFIRE_GRACE
from scheduler.domain.policies import MisfirePolicy
from scheduler.domain.schedule import Schedule
from scheduler.entrypoints.workers.health_app import create_health_app
from scheduler.entrypoints.workers.runtime import WorkerOptions, WorkerRuntime
from scheduler.service_layer.dispatch_service import DispatchSettings
from scheduler.service_layer.planning_service import PlanningSettings
from tests.scheduler.runs.conftest import ManualClock, add_schedule, make_container
from tests.scheduler.runs.processes import wait_until
from tests.scheduler.runs.receiver import Receiver
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.slow

START = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)  # mid-minute; first occurrence at 09:01
FIRST = datetime(2026, 3, 2, 9, 1, tzinfo=UTC)
# After the outage: 09:02..09:06 are more than the grace late (missed); 09:07 is 20 s late,
# within the grace, so it is on time; 09:08 lies beyond the look-ahead and is not planned yet.
RESUMED = datetime(2026, 3, 2, 9, 7, 20, tzinfo=UTC)
OCCURRENCES = [FIRST + timedelta(minutes=i) for i in range(7)]  # 09:01 .. 09:07
# Missed during the outage (09:01 was delivered before it): 09:02 .. 09:06.
MISSED = [t for t in OCCURRENCES[1:] if RESUMED - t > DEFAULT_MISFIRE_GRACE]
assert len(MISSED) == 5  # several occurrences, beyond the grace
LOOKAHEAD = timedelta(seconds=10)
WAIT = 60.0  # seconds; generous bound for a loaded 2-core machine


def options() -> WorkerOptions:
    """Fast polls and short database back-off so the proof takes seconds, not minutes."""
    return WorkerOptions(
        dispatch=DispatchSettings(idle_poll_seconds=0.1, retry_max_seconds=1.0, lease_seconds=30),
        planning=PlanningSettings(lookahead=LOOKAHEAD),
        planner_poll_seconds=0.1,
    )


def expected_statuses(policy: MisfirePolicy) -> list[tuple[datetime, str, str | None]]:
    """(scheduled_for, status, skip_reason) per occurrence, as DESIGN.md §6 says."""
    out: list[tuple[datetime, str, str | None]] = []
    for t in OCCURRENCES:
        skipped = t in MISSED and (
            policy is MisfirePolicy.SKIP
            or (policy is MisfirePolicy.FIRE_ONCE and t != MISSED[-1])  # the latest one runs
        )
        out.append((t, "skipped", "misfire") if skipped else (t, "succeeded", None))
    return out


class Worker:
    """An in-process worker runtime plus its /readyz, served through ASGI (no network)."""

    def __init__(self, container: Container) -> None:
        self.runtime = WorkerRuntime(container, options=options())
        app = create_health_app(self.runtime.registry, container.check_database)
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://worker"
        )
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Worker:
        self.task = asyncio.create_task(self.runtime.run())
        return self

    async def ready(self) -> int:
        return (await self.http.get("/readyz")).status_code

    async def stop(self) -> None:
        await self.runtime.stop(grace_seconds=2)
        if self.task is not None:
            await asyncio.wait_for(self.task, WAIT)
        await self.http.aclose()


async def rows(c: Container) -> list[sa.Row[Any]]:
    async with c.engine.connect() as conn:
        q = sa.select(runs).order_by(runs.c.schedule_id, runs.c.scheduled_for)
        return list(await conn.execute(q))


def settled(count: int, c: Container) -> Callable[[], Awaitable[bool]]:
    """`count` runs exist and none is still open."""

    async def probe() -> bool:
        got = await rows(c)
        return len(got) == count and all(r.status in ("succeeded", "skipped") for r in got)

    return probe


async def first_occurrence_delivered(c: Container, clock: ManualClock, count: int) -> None:
    clock.set(FIRST + timedelta(seconds=1))
    await wait_until(settled(count, c), WAIT, "the 09:01 runs delivered before the outage")


async def add_one_per_policy(c: Container, receiver: Receiver) -> dict[MisfirePolicy, Schedule]:
    made = {}
    for policy in MisfirePolicy:
        made[policy] = await add_schedule(
            c, receiver.url("/ok"), name=f"every-minute-{policy.value}", misfire=policy
        )
        assert made[policy].next_run_at == FIRST
    return made


async def assert_misfire_outcome(
    c: Container, made: dict[MisfirePolicy, Schedule], receiver: Receiver
) -> None:
    got = await rows(c)
    # Exactly one run per occurrence, and only planned ones (no manual triggers here).
    per_occurrence = Counter((r.schedule_id, r.scheduled_for) for r in got)
    assert set(per_occurrence.values()) == {1}
    assert {r.trigger for r in got} == {"schedule"}
    for policy, schedule in made.items():
        mine = [r for r in got if r.schedule_id == schedule.id]
        assert [(r.scheduled_for, r.status, r.skip_reason) for r in mine] == expected_statuses(
            policy
        ), policy
        for r in mine:
            if r.status == "succeeded":
                assert r.attempt_count == 1
                assert r.id in receiver.attempts_by_id
                # Missed occurrences that fire run late: after the outage, never before it.
                assert r.started_at is not None
                assert r.started_at >= (RESUMED if r.scheduled_for > FIRST else FIRST)
            else:
                assert r.attempt_count == 0
                assert r.id not in receiver.attempts_by_id  # a skipped run is never delivered
    assert sum(1 for r in got if r.status == "succeeded") == len(receiver.attempts_by_id)


@pytest.mark.postgres
async def test_postgres_outage_workers_recover_and_missed_occurrences_follow_misfire_policy(
    pg_url: str, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="scheduler.planner")
    clock = ManualClock(START)
    proxy = TcpProxy("127.0.0.1", make_url(pg_url).port or 5432)
    await proxy.start()
    proxied = make_url(pg_url).set(host="127.0.0.1", port=proxy.port)
    direct = make_container(pg_url, clock)  # the test's own view, never through the proxy
    behind_proxy = make_container(proxied.render_as_string(hide_password=False), clock)
    made = await add_one_per_policy(direct, receiver)
    worker = await Worker(behind_proxy).start()
    try:
        await first_occurrence_delivered(direct, clock, count=len(made))
        assert await worker.ready() == 200

        proxy.cut()

        async def not_ready() -> bool:
            return await worker.ready() == 503

        def planner_failures() -> int:
            return sum("planner: database unavailable" in m for m in caplog.messages)

        await wait_until(not_ready, WAIT, "/readyz 503 during the outage")
        await wait_until(lambda: planner_failures() > 0, WAIT, "the planner to hit the outage")
        clock.set(RESUMED)  # several occurrences pass while the database is unreachable
        seen = planner_failures()
        # It keeps retrying (backing off) at the new time, and still cannot plan.
        await wait_until(lambda: planner_failures() > seen, WAIT, "the planner to retry")
        assert worker.task is not None
        assert not worker.task.done()  # still alive, only waiting
        assert len(await rows(direct)) == len(made)  # nothing could be planned meanwhile

        proxy.restore()

        async def ready_again() -> bool:
            return await worker.ready() == 200

        await wait_until(ready_again, WAIT, "/readyz 200 after the outage")
        total = len(made) * len(OCCURRENCES)
        await wait_until(settled(total, direct), WAIT, "missed occurrences planned and settled")
        assert not worker.task.done()  # recovered without a restart
        assert proxy.accepted > 1  # it reconnected through the restored link
    finally:
        await worker.stop()
        await proxy.stop()
        await behind_proxy.aclose()
        await direct.aclose()
    await assert_misfire_outcome(direct, made, receiver)


async def test_sqlite_worker_down_then_missed_occurrences_follow_misfire_policy(
    tmp_path: Path, receiver: Receiver
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'scheduler.db'}"
    await upgrade(url)
    clock = ManualClock(START)
    c = make_container(url, clock)
    try:
        made = await add_one_per_policy(c, receiver)
        first = await Worker(c).start()
        try:
            await first_occurrence_delivered(c, clock, count=len(made))
            assert await first.ready() == 200
        finally:
            await first.stop()
        clock.set(RESUMED)  # the worker is down across several occurrences
        assert len(await rows(c)) == len(made)
        second = await Worker(c).start()
        try:
            assert await second.ready() == 200
            total = len(made) * len(OCCURRENCES)
            await wait_until(settled(total, c), WAIT, "missed occurrences planned and settled")
        finally:
            await second.stop()
        await assert_misfire_outcome(c, made, receiver)
    finally:
        await c.aclose()
