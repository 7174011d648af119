"""The notification API exports servicekit's request metrics under its own prefix, beside the
scheduler's `scheduler_http_*`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.notification.conftest import token


async def test_metrics_show_notification_http_series_after_a_request(
    make_harness: Callable[..., Any], sqlite_url: str
) -> None:
    harness = await make_harness(sqlite_url)
    c = harness.client
    assert (await c.get("/v1/subscriptions/", headers=token("t1"))).status_code == 200
    assert (await c.get("/v1/subscriptions/sub_nope", headers=token("t1"))).status_code == 404
    metrics = await c.get("/metrics")
    assert metrics.status_code == 200
    samples = [s for family in text_string_to_metric_families(metrics.text) for s in family.samples]
    requests = {
        (s.labels["method"], s.labels["route"], s.labels["status"]): s.value
        for s in samples
        if s.name == "notification_http_requests_total"
    }
    # Route templates label the series, never raw ids.
    assert requests[("GET", "/v1/subscriptions/", "200")] >= 1
    assert requests[("GET", "/v1/subscriptions/{sub_id}", "404")] >= 1
    assert any(s.name == "notification_http_request_duration_seconds_count" for s in samples)
    assert not any(s.name.startswith("scheduler_http_") for s in samples)
