"""Pure ASGI middleware: Prometheus request metrics (the body cap is servicekit.http.body_limit)."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "scheduler_http_requests_total",
            "HTTP requests by route template, method and status",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "scheduler_http_request_duration_seconds",
            "HTTP request latency by route template",
            ["method", "route"],
            registry=registry,
        )


class MetricsMiddleware:
    """Labels use the route *template* (never the raw path) so label cardinality stays bounded."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "GET")
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - started)
