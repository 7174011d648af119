"""The worker role's HTTP surface: /healthz (process up), /readyz (database reachable, every
worker loop completed a cycle in time),
/metrics (the workers' Prometheus registry). No routes need a token."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from scheduler.entrypoints.api import health
from servicekit.http.problems import install_problem_handlers
from servicekit.runtime.watchdog import Watchdog


def create_health_app(
    registry: CollectorRegistry,
    check_database: Callable[[], Awaitable[None]],
    watchdog: Watchdog | None = None,
) -> FastAPI:
    """`watchdog`: the workers' (readyz is 503 while one of their loops is overdue)."""
    app = FastAPI(title="scheduler-worker", docs_url=None, redoc_url=None)
    install_problem_handlers(app)
    app.include_router(health.router(check_database, registry, watchdog))
    return app
