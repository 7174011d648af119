"""The scheduler's FastAPI app factory. Everything it needs arrives in an ApiContext built by
bootstrap; lifespan hooks let the composition root start and stop what it owns."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from authclient import TokenVerifier
from authclient.fastapi import install as install_auth
from scheduler.bootstrap import Container, default_entitlements, rotation_grace
from scheduler.entrypoints.api import apply, destinations, health, ledger, schedules, versions
from scheduler.entrypoints.api.completion import install_completion
from scheduler.entrypoints.api.context import ApiContext
from scheduler.entrypoints.api.middleware import Metrics
from scheduler.entrypoints.api.problems import install_problem_handlers
from scheduler.entrypoints.api.runs import install_runs
from scheduler.service_layer.apply import (
    DEFAULT_APPLY_TIMEOUT_SECONDS,
    DEFAULT_MAX_APPLY_REQUEST_BYTES,
)
from servicekit.flow import DestinationPolicy
from servicekit.http.body_limit import DEFAULT_MAX_REQUEST_BYTES, BodyLimitMiddleware
from servicekit.http.deadline import RequestDeadlineMiddleware
from servicekit.http.docs import offline_docs_app
from servicekit.http.health import HEALTH_TAG
from servicekit.http.metrics import HttpMetricsMiddleware
from servicekit.http.protocol import HttpLimits
from servicekit.http.routing import answer_both_slash_forms
from servicekit.http.security_headers import SecurityHeadersMiddleware
from servicekit.http.unavailable import install_unavailable_handlers
from servicekit.runtime.watchdog import Watchdog

Hook = Callable[[], Awaitable[None]]

# One tag per resource, each operation in exactly one; ids are declared on each route
# (`operation_id=`, camelCase verb-first, unique across both services: docs/api.md).
OPENAPI_TAGS = [
    {
        "name": "schedules",
        "description": "Schedule definitions and state, their secrets and planned occurrences.",
    },
    {
        "name": "runs",
        "description": "Runs of a schedule: trigger, history, replay, backfill; the completion "
        "call of a callback-mode run.",
    },
    {
        "name": "destinations",
        "description": "Flow control per destination (host:port): the tenant's limits and "
        "the destination's live state.",
    },
    HEALTH_TAG,
]


def create_app(
    ctx: ApiContext,
    verifier: TokenVerifier,
    *,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    request_timeout_seconds: float = HttpLimits.request_timeout_seconds,
    max_apply_request_bytes: int = DEFAULT_MAX_APPLY_REQUEST_BYTES,
    apply_timeout_seconds: float = DEFAULT_APPLY_TIMEOUT_SECONDS,
    on_startup: list[Hook] | None = None,
    on_shutdown: list[Hook] | None = None,
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        for hook in on_startup or []:
            await hook()
        try:
            yield
        finally:
            for hook in on_shutdown or []:
                await hook()

    app = offline_docs_app(
        title="scheduler",
        version="1",
        description="Cron-as-a-service: schedules, occurrences and (next) runs. DESIGN.md §5.",
        openapi_tags=OPENAPI_TAGS,
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    install_problem_handlers(app)
    install_unavailable_handlers(app)  # a database outage is 503 + Retry-After, not 500
    answer_both_slash_forms(app)  # /v1/schedules answers like /v1/schedules/, no 307
    install_auth(app, verifier)
    app.include_router(health.router(ctx.check_database, ctx.metrics.registry, ctx.watchdog))
    app.include_router(apply.router)  # before /{schedule_id}: its path is a literal
    app.include_router(schedules.router)
    app.include_router(versions.router)
    app.include_router(ledger.router)
    app.include_router(destinations.router)
    app.add_middleware(
        BodyLimitMiddleware,
        limit=max_request_bytes,
        overrides={apply.APPLY_PATH: max_apply_request_bytes},
    )
    app.add_middleware(
        RequestDeadlineMiddleware,
        seconds=request_timeout_seconds,
        overrides={apply.APPLY_PATH: apply_timeout_seconds},
    )
    app.add_middleware(HttpMetricsMiddleware, metrics=ctx.metrics)
    app.add_middleware(SecurityHeadersMiddleware)
    return app


def app_from_container(
    container: Container,
    *,
    migrate_on_start: bool = False,
    wake: Callable[[], None] | None = None,
    registry: CollectorRegistry | None = None,
    watchdog: Watchdog | None = None,
) -> FastAPI:
    """The app wired to a bootstrap Container; the engine is disposed on shutdown. `wake` tells
    an in-process dispatcher that a run was triggered; `registry` shares /metrics with workers
    running in the same process (role `all`), and `watchdog` their loops to /readyz. The tenant
    projections are loaded on start-up (after migrating) and refreshed while the app runs:
    limits come from the cache, suspension of writes is checked exactly."""
    ctx = ApiContext(
        uow_factory=container.uow_factory,
        clock=container.clock,
        new_secret=container.new_secret,
        limits_for=container.limits_for,
        check_database=container.check_database,
        allow_private_networks=container.settings.webhook_allow_private_networks,
        allowed_ports=container.settings.webhook_allowed_ports,
        rotation_grace=rotation_grace(container.settings),
        metrics=Metrics(registry or CollectorRegistry()),
        ensure_writable=container.ensure_writable,
        watchdog=watchdog,
        destination_defaults=DestinationPolicy(
            container.settings.destination_max_in_flight,
            container.settings.destination_per_second,
        ),
        max_destinations=container.settings.max_destinations,
    )
    startup: list[Hook] = [container.migrate] if migrate_on_start else []
    app = create_app(
        ctx,
        container.verifier,
        max_request_bytes=container.settings.max_request_bytes,
        request_timeout_seconds=container.settings.http_request_timeout_seconds,
        max_apply_request_bytes=container.settings.max_apply_request_bytes,
        apply_timeout_seconds=container.settings.http_apply_timeout_seconds,
        on_startup=[*startup, container.start_tenants],
        on_shutdown=[container.stop_tenants, container.aclose],
    )
    install_runs(
        app, container.uow_factory, container.clock, wake, default_entitlements(container.settings)
    )
    install_completion(app, container.settings.completion_calls_per_minute)
    return app
