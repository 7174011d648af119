"""The worker role's HTTP surface: /healthz (process up), /readyz (database reachable),
/metrics (the workers' Prometheus registry). No routes need a token."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from scheduler.entrypoints.api import health
from servicekit.problems import install_problem_handlers


def create_health_app(
    registry: CollectorRegistry, check_database: Callable[[], Awaitable[None]]
) -> FastAPI:
    app = FastAPI(title="scheduler-worker", docs_url=None, redoc_url=None)
    install_problem_handlers(app)
    app.include_router(health.router(check_database, registry))
    return app
