"""The scheduler API's request metrics: servicekit's (`servicekit.http.metrics`), named
`scheduler_http_*`, the names deploy/'s rules and dashboards query."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from servicekit.http.metrics import HttpMetrics


class Metrics(HttpMetrics):
    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry, prefix="scheduler")
