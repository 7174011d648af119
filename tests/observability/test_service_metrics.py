"""The metrics added for the alerts: `<service>_ready` follows /readyz, and
`scheduler_breaker_trips_total{tenant_id}` counts the schedules a real dispatcher's breaker
paused."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

import webhookdeliver as wd
from scheduler.adapters.actions import ActionRouter, WebhookAction
from scheduler.adapters.db.migrate import upgrade
from scheduler.entrypoints.workers.metrics import WorkerMetrics
from scheduler.service_layer.dispatch_service import RunDispatcher
from scheduler.service_layer.event_action import PublishingEventAction
from scheduler.service_layer.planning_service import plan_due
from servicekit.http.health import health_router
from tests.observability.endpoint import Endpoint
from tests.scheduler.conftest import ManualClock
from tests.scheduler.runs.conftest import add_schedule, make_container
from tests.scheduler.runs.dispatch_helpers import PLAN, step


async def test_ready_gauge_follows_the_last_readiness_check() -> None:
    registry = CollectorRegistry()
    database_up = True

    async def readiness() -> bool:
        if not database_up:
            raise ConnectionError("database down")
        return True

    app = FastAPI()
    app.include_router(health_router(readiness, registry, metric_prefix="svc"))
    app.include_router(health_router(readiness, registry, metric_prefix="svc"))  # shared gauge
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc.test") as client:
        assert registry.get_sample_value("svc_ready") == 0  # no check yet
        assert (await client.get("/readyz")).status_code == 200
        assert registry.get_sample_value("svc_ready") == 1
        database_up = False
        assert (await client.get("/readyz")).status_code == 503
        assert registry.get_sample_value("svc_ready") == 0
        assert "svc_ready 0.0" in (await client.get("/metrics")).text


async def test_breaker_trips_are_counted_per_tenant(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'scheduler.db'}"
    await upgrade(url)
    clock = ManualClock()
    container = make_container(url, clock)
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    try:
        async with Endpoint() as bad, wd.Deliverer(allow_private_networks=True) as deliverer:
            for tenant, name in (("ten_a", "a1"), ("ten_a", "a2"), ("ten_b", "b1")):
                await add_schedule(
                    container,
                    bad.url("/fail"),
                    tenant=tenant,
                    name=name,
                    max_attempts=1,
                    threshold=1,
                )
            await add_schedule(container, bad.url("/ok"), tenant="ten_c", name="c", threshold=1)
            dispatcher = RunDispatcher(
                container.uow_factory,
                ActionRouter(
                    WebhookAction(deliverer, container.clock),
                    PublishingEventAction(container.publisher, container.clock),
                ),
                container.clock,
                worker_id="w",
                observer=metrics,
                rng=random.Random(1),
            )
            clock.set(clock().replace(minute=1, second=0))
            await plan_due(container.uow_factory, now=clock(), settings=PLAN)
            assert await step(dispatcher) == 4
    finally:
        await container.aclose()

    def trips(tenant: str) -> float | None:
        return registry.get_sample_value("scheduler_breaker_trips_total", {"tenant_id": tenant})

    assert (trips("ten_a"), trips("ten_b"), trips("ten_c")) == (2, 1, None)
