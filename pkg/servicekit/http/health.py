"""`/healthz` (process alive), `/readyz` (dependencies reachable) and `/metrics` (Prometheus).

With a `metric_prefix`, each `/readyz` check also sets `<prefix>_ready` (1 ready, 0 not; 0 until
the first check): the orchestrator's probe keeps it current, so an alert can see a pod that
stays unready even though its /metrics still answers.

Readiness is bounded: a check that has not answered within `READY_TIMEOUT_SECONDS` is "not
ready" (and cancelled without waiting for it: a hung database must not hang the probe). With a
`watchdog` (`servicekit.runtime.watchdog`), a worker loop that has not completed a cycle in time
makes
the answer 503 too, naming the loops in `overdue_loops`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Gauge,
    generate_latest,
)

from servicekit.http.problems import problem_response
from servicekit.runtime.watchdog import Watchdog

Readiness = Callable[[], Awaitable[bool]]
READY_TIMEOUT_SECONDS = 2.0

# The OpenAPI tag of the probes, for an app's `openapi_tags`.
HEALTH_TAG = {"name": "health", "description": "Liveness and readiness probes; no token."}

# One gauge per (registry, name): a process that builds several apps on one registry (tests, the
# API and the worker health app of role `all`) shares it instead of failing on a duplicate.
_READY_GAUGES: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, Gauge]] = (
    weakref.WeakKeyDictionary()
)


def readiness_gauge(registry: CollectorRegistry, metric_prefix: str) -> Gauge:
    gauges = _READY_GAUGES.setdefault(registry, {})
    name = f"{metric_prefix}_ready"
    if name not in gauges:
        gauges[name] = Gauge(
            name, "1 when the last /readyz check passed, 0 when it failed.", registry=registry
        )
    return gauges[name]


def health_router(
    readiness: Readiness,
    registry: CollectorRegistry = REGISTRY,
    *,
    metric_prefix: str | None = None,
    watchdog: Watchdog | None = None,
    service: str = "",
) -> APIRouter:
    """`service` names the operations in OpenAPI (`getSchedulerHealth`, `getSchedulerReadiness`):
    a client generated for several services needs ids unique across them."""
    router = APIRouter(tags=[HEALTH_TAG["name"]])
    op = service[:1].upper() + service[1:]
    ready_gauge = None if metric_prefix is None else readiness_gauge(registry, metric_prefix)

    @router.get("/healthz", operation_id=f"get{op}Health")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz", operation_id=f"get{op}Readiness", response_model=None)
    async def readyz() -> Response | dict[str, str]:
        overdue = watchdog.overdue() if watchdog is not None else []
        ready = not overdue and await bounded(readiness)
        if ready_gauge is not None:
            ready_gauge.set(1 if ready else 0)
        if overdue:
            return problem_response(
                503,
                slug="not-ready",
                detail=f"worker loops overdue: {', '.join(overdue)}",
                instance="/readyz",
                extra={"overdue_loops": overdue},
            )
        if not ready:
            return problem_response(
                503, slug="not-ready", detail="a dependency is not ready", instance="/readyz"
            )
        return {"status": "ready"}

    @router.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return router


async def bounded(readiness: Readiness, seconds: float = READY_TIMEOUT_SECONDS) -> bool:
    """`readiness()` within `seconds`; any failure, or no answer in time, is "not ready"."""
    task = asyncio.ensure_future(readiness())
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()  # not awaited: its cancellation may itself wait on the hung dependency
        task.add_done_callback(_consume)
        return False
    try:
        return bool(task.result())
    except Exception:  # any failure of a dependency check means "not ready"
        return False


def _consume(task: asyncio.Future[bool]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" warning
