"""The worker-loop watchdog: a step past its timeout is cancelled and logged by loop name, a loop
that has not completed a cycle in time makes /readyz 503 naming it, and a readiness check that
hangs answers 503 within its bound."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from servicekit.http.health import bounded, health_router
from servicekit.runtime.watchdog import Watchdog
from servicekit.runtime.worker import WorkerGroup, WorkerLoop
from tests.support.processes import wait_until

WAIT = 10.0  # generous bound on outcomes for a loaded machine


class Gate:
    """A step that hangs while the gate is closed and returns at once while it is open."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.completed = 0

    async def step(self) -> float | None:
        await self.open.wait()
        self.completed += 1
        return None


async def test_hung_step_is_cancelled_logged_and_reported_overdue_until_it_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="servicekit.runtime.worker")
    gate = Gate()
    gate.open.set()
    watchdog = Watchdog(step_timeout_seconds=0.3)
    group = WorkerGroup(watchdog=watchdog)
    group.add_loop(
        WorkerLoop(
            "hangs",
            gate.step,
            idle_seconds=0.05,
            backoff_initial_seconds=0.05,
            backoff_max_seconds=0.05,
        )
    )
    healthy = Gate()
    healthy.open.set()
    group.add_loop(WorkerLoop("healthy", healthy.step, idle_seconds=0.05, step_timeout_seconds=30))
    task = asyncio.create_task(group.run())
    try:

        async def cycles() -> bool:
            return gate.completed > 0 and watchdog.watched == ["hangs", "healthy"]

        await wait_until(cycles, WAIT, "both loops registered and cycling")
        assert watchdog.overdue() == []

        gate.open.clear()  # the next step hangs (a database that keeps the connection, silent)

        def timeouts() -> list[str]:
            return [m for m in caplog.messages if "step took longer than 0.3 s" in m]

        async def overdue() -> bool:
            return watchdog.overdue() == ["hangs"] and bool(timeouts())

        await wait_until(overdue, WAIT, "the hung loop reported overdue")
        timed_out = timeouts()
        assert timed_out  # cancelled and retried
        assert timed_out[0].startswith("hangs: ")  # named

        done = gate.completed
        gate.open.set()

        async def recovered() -> bool:
            return gate.completed > done and watchdog.overdue() == []

        await wait_until(recovered, WAIT, "the loop recovered by itself")
    finally:
        await group.stop(grace_seconds=1)
        await task
    assert watchdog.watched == []  # a stopped loop is no longer watched


async def test_readyz_is_503_naming_overdue_loops() -> None:
    now = [0.0]
    watchdog = Watchdog(step_timeout_seconds=5, clock=lambda: now[0])
    gate = Gate()
    gate.open.set()
    group = WorkerGroup(watchdog=watchdog)
    group.add_loop(WorkerLoop("planner", gate.step, idle_seconds=1.0))
    task = asyncio.create_task(group.run())

    async def ready() -> bool:
        return True

    app = FastAPI()
    app.include_router(health_router(ready, CollectorRegistry(), watchdog=watchdog))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            await wait_until(lambda: gate.completed > 0, WAIT, "a first cycle")
            assert (await client.get("/readyz")).status_code == 200
            now[0] = 1.0 + 5.0 + 0.1  # past the idle wait plus one step timeout, no cycle since
            gate.open.clear()
            answer = await client.get("/readyz")
            assert answer.status_code == 503
            assert answer.headers["content-type"].startswith("application/problem+json")
            assert answer.json()["overdue_loops"] == ["planner"]
            assert "planner" in answer.json()["detail"]
    finally:
        gate.open.set()
        await group.stop(grace_seconds=1)
        await task


async def test_a_readiness_check_that_hangs_is_not_ready_within_its_bound() -> None:
    release = asyncio.Event()

    async def hangs_even_when_cancelled() -> bool:
        await asyncio.shield(release.wait())  # like a driver stuck on a silent socket
        return True

    started = time.monotonic()
    assert await bounded(hangs_even_when_cancelled, seconds=0.2) is False
    assert time.monotonic() - started < 2.0
    release.set()
