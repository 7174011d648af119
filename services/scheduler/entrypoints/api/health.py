"""Unauthenticated operational endpoints: /healthz (process up), /readyz (database reachable),
/metrics (Prometheus text format)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduler.entrypoints.api.context import context_of
from scheduler.entrypoints.api.problems import problem

router = APIRouter(tags=["health"])
READY_TIMEOUT_SECONDS = 2.0


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
async def readyz(request: Request) -> dict[str, str] | Response:
    ctx = context_of(request)
    try:
        await asyncio.wait_for(ctx.check_database(), READY_TIMEOUT_SECONDS)
    except Exception as exc:  # any failure means "not ready"; the reason is logged, not shown
        return problem(503, f"database not reachable ({type(exc).__name__})", slug="not-ready")
    return {"status": "ready"}


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    return Response(
        generate_latest(context_of(request).metrics.registry), media_type=CONTENT_TYPE_LATEST
    )
