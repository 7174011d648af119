"""The FastAPI application of the notification service."""

from __future__ import annotations

from fastapi import FastAPI

from authclient import TokenVerifier
from authclient.fastapi import install
from notification.bootstrap import Container
from notification.entrypoints.api import alert_contacts, notifications, subscriptions
from servicekit.http.body_limit import BodyLimitMiddleware
from servicekit.http.deadline import RequestDeadlineMiddleware
from servicekit.http.docs import offline_docs_app
from servicekit.http.health import HEALTH_TAG, health_router
from servicekit.http.metrics import HttpMetricsMiddleware, http_metrics
from servicekit.http.problems import install_problem_handlers
from servicekit.http.routing import answer_both_slash_forms
from servicekit.http.security_headers import SecurityHeadersMiddleware
from servicekit.http.unavailable import install_unavailable_handlers
from servicekit.runtime.watchdog import Watchdog

# One tag per resource, each operation in exactly one; ids are declared on each route
# (`operation_id=`, camelCase verb-first, unique across both services: docs/api.md).
OPENAPI_TAGS = [
    {"name": "subscriptions", "description": "Webhook subscriptions to the platform's events."},
    {"name": "deliveries", "description": "A subscription's event deliveries, and replay."},
    {"name": "alert-contacts", "description": "The tenant's alert email addresses."},
    {"name": "notifications", "description": "In-app notifications (the console's bell)."},
    HEALTH_TAG,
]


def create_app(
    container: Container, verifier: TokenVerifier, *, watchdog: Watchdog | None = None
) -> FastAPI:
    """`watchdog`: the in-process workers' (readyz is 503 while one of their loops is overdue)."""
    app = offline_docs_app(
        title="notification",
        version="1",
        description="Webhook subscriptions, fan-out deliveries, email and in-app alerts.",
        openapi_tags=OPENAPI_TAGS,
    )
    app.state.container = container
    install_problem_handlers(app)
    install_unavailable_handlers(app)  # a database outage is 503 + Retry-After, not 500
    answer_both_slash_forms(app)  # /v1/subscriptions answers like /v1/subscriptions/, no 307
    install(app, verifier)
    app.include_router(
        health_router(
            container.store.ping,
            metric_prefix="notification",
            watchdog=watchdog,
            service="notification",
        )
    )
    app.include_router(subscriptions.router)
    app.include_router(subscriptions.deliveries_router)
    app.include_router(alert_contacts.router)
    app.include_router(notifications.router)
    app.add_middleware(BodyLimitMiddleware, limit=container.settings.max_request_bytes)
    app.add_middleware(
        RequestDeadlineMiddleware, seconds=container.settings.http_request_timeout_seconds
    )
    app.add_middleware(HttpMetricsMiddleware, metrics=http_metrics("notification"))
    app.add_middleware(SecurityHeadersMiddleware)
    return app
