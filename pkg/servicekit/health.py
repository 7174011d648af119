"""`/healthz` (process alive), `/readyz` (dependencies reachable) and `/metrics` (Prometheus)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from servicekit.problems import problem_response

Readiness = Callable[[], Awaitable[bool]]


def health_router(readiness: Readiness, registry: CollectorRegistry = REGISTRY) -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz", response_model=None)
    async def readyz() -> Response | dict[str, str]:
        try:
            ready = await readiness()
        except Exception:  # any failure of a dependency check means "not ready"
            ready = False
        if not ready:
            return problem_response(503, slug="not-ready", detail="a dependency is not ready")
        return {"status": "ready"}

    @router.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return router
