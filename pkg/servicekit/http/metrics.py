"""HTTP request metrics of both APIs, as pure ASGI middleware, each service under its prefix:
`<prefix>_http_requests_total` (method, route, status) and
`<prefix>_http_request_duration_seconds` (method, route).

Labels use the route *template* (never the raw path), so label cardinality stays bounded; a
request no route matched is `unmatched`.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HttpMetrics:
    def __init__(self, registry: CollectorRegistry, prefix: str) -> None:
        self.registry = registry
        self.requests = Counter(
            f"{prefix}_http_requests_total",
            "HTTP requests by route template, method and status",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            f"{prefix}_http_request_duration_seconds",
            "HTTP request latency by route template",
            ["method", "route"],
            registry=registry,
        )


# One per (registry, prefix): a process that builds several apps on one registry (tests, the
# embedded process) shares them instead of failing on a duplicate.
_SHARED: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, HttpMetrics]] = (
    weakref.WeakKeyDictionary()
)


def http_metrics(prefix: str, registry: CollectorRegistry = REGISTRY) -> HttpMetrics:
    by_prefix = _SHARED.setdefault(registry, {})
    if prefix not in by_prefix:
        by_prefix[prefix] = HttpMetrics(registry, prefix)
    return by_prefix[prefix]


class HttpMetricsMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: HttpMetrics) -> None:
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
