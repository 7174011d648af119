"""The worker runtime as `scheduler serve` builds it (WorkerRuntime.from_container): ONE publisher
shared by the outbox relay and the event action, and the tenant consumer feeding the projection
cache the planner and dispatcher read — all over the container's in-process bus."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from authclient import AuthSettings
from eventbus import Message, decode, encode, envelope
from scheduler.bootstrap import Container, bootstrap
from scheduler.domain.policies import Action
from scheduler.entrypoints.workers.runtime import WorkerRuntime
from scheduler.service_layer import runs as run_svc
from tests.scheduler.conftest import HS256_KEY
from tests.scheduler.runs.conftest import SECRET, ManualClock, add_schedule, make_settings
from tests.scheduler.runs.processes import wait_until

WAIT_SECONDS = 15.0


async def until(probe: Callable[[], Awaitable[bool]], what: str) -> None:
    await wait_until(probe, WAIT_SECONDS, what, every=0.05)


async def test_event_runs_relay_and_tenant_state_share_the_bus(
    container: Container, mclock: ManualClock
) -> None:
    assert container.bus is not None
    events = container.bus.consumer(["schedule-events"], "test-reader")
    await events.start()
    seen: list[dict[str, Any]] = []
    runtime = WorkerRuntime.from_container(container)
    task = asyncio.create_task(runtime.run())
    try:
        schedule = await add_schedule(container, None, action=Action.EVENT, name="evt")
        run = await run_svc.trigger_run(
            runtime.uows,
            tenant_id="tenant-a",
            schedule_id=schedule.id,
            clock=container.clock,
            wake=runtime.wake,
        )

        async def relayed() -> bool:
            seen.extend(decode(r.value) for r in await events.poll(timeout_seconds=0.05))
            types = {e["type"] for e in seen if e["schedule_id"] == schedule.id}
            return {"schedule.created", "schedule.triggered", "schedule.run.succeeded"} <= types

        # created: outbox -> relay; triggered: the event action, acknowledged by the bus;
        # run.succeeded: written with the run's success, relayed.
        await until(relayed, "the schedule's events on the bus")
        triggered = next(e for e in seen if e["type"] == "schedule.triggered")
        assert triggered["run_id"] == run.id
        assert triggered["data"] == {"job": "evt"}

        # platform-events on the same bus -> the tenant consumer -> the shared cache.
        suspended_at = mclock() - timedelta(minutes=1)
        publisher = container.bus.publisher()
        await publisher.start()
        await publisher.publish(
            [
                Message(
                    topic="platform-events",
                    key="tenant-a",
                    value=encode(
                        envelope(
                            id="evt_suspend_1",
                            type="tenant.suspended",
                            tenant_id="tenant-a",
                            time=suspended_at,
                            data={},
                        )
                    ),
                )
            ]
        )

        async def suspended() -> bool:
            return container.tenants.suspended_at("tenant-a", mclock())

        await until(suspended, "the consumer to update the projection cache")
        assert not container.tenants.suspended_at("tenant-b", mclock())
    finally:
        await runtime.stop(grace_seconds=2)
        await asyncio.wait_for(task, WAIT_SECONDS)
        await events.stop()


async def test_the_dispatcher_gets_the_configured_lease_expiry_limit(
    database_url: str, mclock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCHEDULER_MAX_LEASE_EXPIRIES", "3")
    settings = make_settings(database_url)
    assert settings.max_lease_expiries == 3
    c = bootstrap(
        settings,
        clock=mclock,
        auth_settings=AuthSettings(AUTH_HS256_KEY=SecretStr(HS256_KEY)),
        new_secret=lambda: SECRET,
    )
    try:
        assert WorkerRuntime.from_container(c).dispatcher.leases.max_lease_expiries == 3
    finally:
        await c.aclose()
