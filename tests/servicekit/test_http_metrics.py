"""servicekit's request metrics middleware: names under the given prefix, route templates as
labels, one set of metrics per (registry, prefix)."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from servicekit.http.metrics import HttpMetrics, HttpMetricsMiddleware, http_metrics


async def test_requests_are_counted_by_route_template_under_the_prefix() -> None:
    registry = CollectorRegistry()
    app = FastAPI()

    @app.get("/things/{thing_id}")
    async def thing(thing_id: str) -> dict[str, str]:
        return {"id": thing_id}

    app.add_middleware(HttpMetricsMiddleware, metrics=HttpMetrics(registry, prefix="svc"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        assert (await client.get("/things/a")).status_code == 200
        assert (await client.get("/things/b")).status_code == 200
        assert (await client.get("/nowhere")).status_code == 404
    count = registry.get_sample_value
    ok = {"method": "GET", "route": "/things/{thing_id}", "status": "200"}
    assert count("svc_http_requests_total", ok) == 2
    missing = {"method": "GET", "route": "unmatched", "status": "404"}
    assert count("svc_http_requests_total", missing) == 1
    by_route = {"method": "GET", "route": "/things/{thing_id}"}
    assert count("svc_http_request_duration_seconds_count", by_route) == 2


def test_one_set_per_registry_and_prefix() -> None:
    registry = CollectorRegistry()
    first = http_metrics("a", registry)
    assert http_metrics("a", registry) is first  # a second app on the registry shares them
    assert http_metrics("b", registry) is not first
    assert http_metrics("a", CollectorRegistry()) is not first
