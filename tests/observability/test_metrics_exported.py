"""Every metric the alerting rules and the dashboard query is exported by a running service:
real `scheduler serve --role worker`, `--role api` and `notification serve` processes (SQLite,
dev keys, in-process bus) are started and their /metrics read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.observability.references import (
    dashboard_exprs,
    exported_names,
    metric_names,
    recorded_names,
    recording_refs,
    rule_exprs,
)
from tests.support.processes import ServiceProcess

# The children must not inherit the suite's databases, brokers or keys: --dev gives each its
# own SQLite file and dev keys under its working directory.
STRIPPED = ("SCHEDULER_", "NOTIFICATION_", "AUTH_", "KAFKA_", "EMBEDDED_")
COMMANDS = {
    "scheduler worker": ("scheduler.entrypoints.cli", "serve", "--role", "worker"),
    "scheduler api": ("scheduler.entrypoints.cli", "serve", "--role", "api"),
    "notification": ("notification.entrypoints.cli", "serve"),
}
PARENT_ONLY = {"scheduler_worker_process_restarts_total"}


@pytest.fixture
async def exported(tmp_path: Path) -> AsyncIterator[dict[str, set[str]]]:
    procs: dict[str, ServiceProcess] = {}
    for role, (module, *args) in COMMANDS.items():
        workdir = tmp_path / role.replace(" ", "-")
        workdir.mkdir()
        procs[role] = ServiceProcess(
            module,
            workdir,
            args=(*args, "--dev", "--port", "{port}"),
            name=role.replace(" ", "-"),
            strip_env_prefixes=STRIPPED,
        )
    try:
        await asyncio.gather(*(p.start() for p in procs.values()))
        names: dict[str, set[str]] = {}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            for role, proc in procs.items():
                async with http.get(proc.base_url + "/readyz") as ready:
                    assert ready.status == 200, proc.output()
                async with http.get(proc.base_url + "/metrics") as resp:
                    assert resp.status == 200
                    text = await resp.text()
                names[role] = exported_names(list(text_string_to_metric_families(text)))
        yield names
    finally:
        for proc in procs.values():
            await proc.aclose()


async def test_rules_and_dashboard_reference_only_metrics_their_roles_export(
    exported: dict[str, set[str]],
) -> None:
    # The `--processes N` parent's own metric: it exists only under a parent (PostgreSQL, N > 1),
    # and tests/scheduler/runs/test_worker_processes.py reads it from a real one.
    everything = set().union(*exported.values(), PARENT_ONLY)
    referenced = metric_names(rule_exprs()) | metric_names(dashboard_exprs())
    assert len(referenced) >= 25
    missing = sorted(referenced - everything)
    assert not missing, f"referenced but exported by no service: {missing}"
    # Recording rules the dashboard or alerts use are defined in alerts.yml.
    assert recording_refs(rule_exprs() + dashboard_exprs()) <= recorded_names()
    # The metrics that page must come from the role that runs the work, where the scrape config
    # of deploy/kubernetes finds them.
    worker = {
        "scheduler_run_lag_seconds_bucket",
        "scheduler_runs_due",
        "scheduler_delivery_attempts_total",
        "scheduler_outbox_oldest_unsent_age_seconds",
        "scheduler_outbox_relay_leader",
        "scheduler_breaker_trips_total",
        "scheduler_ready",
    }
    assert worker <= exported["scheduler worker"]
    assert {"scheduler_http_requests_total", "scheduler_ready"} <= exported["scheduler api"]
    assert {
        "notification_delivery_attempts_total",
        "notification_endpoints_disabled_total",
        "notification_ready",
    } <= exported["notification"]
