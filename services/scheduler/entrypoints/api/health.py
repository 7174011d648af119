"""Unauthenticated operational endpoints, servicekit's: /healthz (process up), /readyz (the
database answers within READY_TIMEOUT_SECONDS; 503 problem+json otherwise), /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from prometheus_client import CollectorRegistry

from servicekit.health import Readiness, health_router

READY_TIMEOUT_SECONDS = 2.0


def database_ready(check_database: Callable[[], Awaitable[None]]) -> Readiness:
    """Readiness = the database answered `SELECT 1` in time (any error: not ready)."""

    async def ready() -> bool:
        await asyncio.wait_for(check_database(), READY_TIMEOUT_SECONDS)
        return True

    return ready


def router(check_database: Callable[[], Awaitable[None]], registry: CollectorRegistry) -> APIRouter:
    return health_router(database_ready(check_database), registry)
