"""The worker role's HTTP surface: /healthz (process up), /readyz (database reachable),
/metrics (the workers' Prometheus registry). No routes need a token."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

READY_TIMEOUT_SECONDS = 2.0


def create_health_app(
    registry: CollectorRegistry, check_database: Callable[[], Awaitable[None]]
) -> FastAPI:
    app = FastAPI(title="scheduler-worker", docs_url=None, redoc_url=None)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", response_model=None)
    async def readyz() -> dict[str, str] | Response:
        try:
            await asyncio.wait_for(check_database(), READY_TIMEOUT_SECONDS)
        except Exception as exc:  # any failure means "not ready"
            return JSONResponse(
                {"status": "not ready", "detail": type(exc).__name__},
                status_code=503,
                media_type="application/problem+json",
            )
        return {"status": "ready"}

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
