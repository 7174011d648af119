"""Unauthenticated operational endpoints, servicekit's: /healthz (process up), /readyz (the
database answers within servicekit's READY_TIMEOUT_SECONDS, and with a watchdog every worker
loop of the process completed a cycle in time; 503 problem+json otherwise; `scheduler_ready`
records the last answer), /metrics."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from prometheus_client import CollectorRegistry

from servicekit.http.health import Readiness, health_router
from servicekit.runtime.watchdog import Watchdog


def database_ready(check_database: Callable[[], Awaitable[None]]) -> Readiness:
    """Readiness = the database answered `SELECT 1` (servicekit bounds the wait; any error: not
    ready)."""

    async def ready() -> bool:
        await check_database()
        return True

    return ready


def router(
    check_database: Callable[[], Awaitable[None]],
    registry: CollectorRegistry,
    watchdog: Watchdog | None = None,
) -> APIRouter:
    return health_router(
        database_ready(check_database),
        registry,
        metric_prefix="scheduler",
        watchdog=watchdog,
        service="scheduler",
    )
