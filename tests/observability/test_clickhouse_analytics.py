"""Run analytics on chDB over envelopes the scheduler really emitted: a real scheduler (SQLite,
in-process bus, manual clock) delivers to two loopback receivers through a downtime (misfire
skips), retries and failures; the outbox relay publishes to the in-process bus; what it published
goes through the materialised view of deploy/clickhouse and every shipped query is checked
against the runs table the scheduler wrote."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import webhookdeliver as wd
from eventbus import Record, decode
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import delivery_attempts, runs
from scheduler.bootstrap import Container, make_relay
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from scheduler.service_layer.planning_service import plan_due
from scheduler.service_layer.runs import trigger_run
from tests.observability.clickhouse import QUEUE_DDL, Analytics, sql_of
from tests.observability.endpoint import Endpoint
from tests.scheduler.conftest import T0, ManualClock
from tests.scheduler.runs.conftest import add_schedule, make_container
from tests.scheduler.runs.dispatch_helpers import PLAN, make_dispatcher, step

WAIT_SECONDS = 10.0  # bound on reading the bus
MS = timedelta(milliseconds=1)
DAY = {"from": "2026-03-02 00:00:00", "to": "2026-03-03 00:00:00"}


@dataclass
class Produced:
    records: list[Record]
    runs: list[sa.Row[Any]]
    delivery_ms: dict[str, int]
    schedules: dict[str, str]  # name -> id
    good: str  # endpoint host:port
    bad: str


async def produce(container: Container, clock: ManualClock) -> Produced:
    """The timeline (UTC, 2026-03-02): schedules every minute from 09:01; the scheduler is down
    until 09:03:10 (fire_once: the missed 09:01 and 09:02 are skipped), then on time at 09:04
    (dispatched 250 ms late) and 09:05 (1.5 s late); retries 2 s later; one manual trigger."""
    uows = container.uow_factory
    async with (
        Endpoint() as good,
        Endpoint() as bad,
        wd.Deliverer(allow_private_networks=True) as d,
    ):
        ids = {
            "ok": (await add_schedule(container, good.url("/ok"), tenant="ten_a", name="ok")).id,
            "flaky": (
                await add_schedule(
                    container, good.url("/flaky"), tenant="ten_a", name="flaky", initial_backoff=1
                )
            ).id,
            "broken": (
                await add_schedule(
                    container,
                    bad.url("/fail"),
                    tenant="ten_b",
                    name="broken",
                    max_attempts=1,
                    threshold=100,
                )
            ).id,
            "gone": (
                await add_schedule(
                    container, bad.url("/gone"), tenant="ten_b", name="gone", threshold=100
                )
            ).id,
        }
        dispatcher = make_dispatcher(container, uows, d)
        for at in (
            T0.replace(minute=3, second=10),
            T0.replace(minute=4, second=0, microsecond=250_000),
            T0.replace(minute=5, second=1, microsecond=500_000),
        ):
            clock.set(at)
            await plan_due(uows, now=clock(), settings=PLAN)
            await step(dispatcher)
            clock.advance(seconds=2)  # the flaky run's retry (backoff <= 1 s) is due
            await step(dispatcher)
        await trigger_run(uows, tenant_id="ten_a", schedule_id=ids["ok"], clock=clock)
        await step(dispatcher)

        # Publish the outbox the way the worker does, to the in-process bus, and read it back.
        assert container.bus is not None
        reader = container.bus.consumer([SCHEDULE_EVENTS_TOPIC], "analytics-test")
        await reader.start()
        publisher = container.bus.publisher()
        await publisher.start()
        try:
            published = await make_relay(container, publisher).drain()
            records: list[Record] = []
            async with asyncio.timeout(WAIT_SECONDS):
                while len(records) < published:
                    records += await reader.poll(max_records=published)
        finally:
            await publisher.stop()
            await reader.stop()
    async with container.engine.connect() as conn:
        run_rows = list(await conn.execute(sa.select(runs)))
        totals = await conn.execute(
            sa.select(
                delivery_attempts.c.run_id, sa.func.sum(delivery_attempts.c.duration_ms)
            ).group_by(delivery_attempts.c.run_id)
        )
        delivery_ms = {r: int(ms) for r, ms in totals}
    return Produced(
        records, run_rows, delivery_ms, ids, f"127.0.0.1:{good.port}", f"127.0.0.1:{bad.port}"
    )


@pytest.fixture
async def produced(tmp_path: Path) -> AsyncIterator[Produced]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'scheduler.db'}"
    await upgrade(url)
    clock = ManualClock()
    container = make_container(url, clock)
    try:
        yield await produce(container, clock)
    finally:
        await container.aclose()


@pytest.fixture
def analytics(tmp_path: Path) -> AsyncIterator[Analytics]:
    a = Analytics(tmp_path)
    yield a
    a.close()


def test_kafka_table_ddl_parses(analytics: Analytics) -> None:
    ast = analytics.run("EXPLAIN AST " + sql_of(QUEUE_DDL), "TSVRaw")
    assert "Identifier schedule_events_queue" in ast
    assert "Function Kafka" in ast
    ddl = sql_of(QUEUE_DDL)
    for setting in ("kafka_topic_list = 'schedule-events'", "kafka_format = 'JSONAsString'"):
        assert setting in ddl


async def test_view_makes_one_row_per_finished_run(
    produced: Produced, analytics: Analytics
) -> None:
    values = [r.value for r in produced.records]
    types = Counter(decode(v)["type"] for v in values)
    assert types["schedule.created"] == 4, "other event types are on the topic too"
    analytics.publish(values)
    analytics.publish(values)  # at-least-once: a redelivered event must not count twice
    out = analytics.run(
        "SELECT run_id, status, trigger, attempt_count, skip_reason, error_kind, status_code,"
        " endpoint, toString(due_at) AS due_at, lag_ms, delivery_ms FROM run_analytics.runs FINAL",
        "JSONEachRow",
    )
    rows = {r["run_id"]: r for r in map(json.loads, out.splitlines())}
    terminal = [r for r in produced.runs if r.status in ("succeeded", "failed", "skipped")]
    assert len(terminal) == len(produced.runs) == 21
    assert sorted(rows) == sorted(r.id for r in terminal)
    endpoint_of = {
        produced.schedules["ok"]: produced.good,
        produced.schedules["flaky"]: produced.good,
        produced.schedules["broken"]: produced.bad,
        produced.schedules["gone"]: produced.bad,
    }
    for run in terminal:
        row = rows[run.id]
        attempted = run.attempt_count > 0
        due = run.scheduled_for if run.due_at is None else run.due_at
        lag = (run.started_at - due) // MS if attempted else None
        assert row == {
            "run_id": run.id,
            "status": run.status,
            "trigger": run.trigger,
            "attempt_count": run.attempt_count,
            "skip_reason": run.skip_reason or "",
            "error_kind": "http_status" if run.status == "failed" else "",
            "status_code": row["status_code"],
            "endpoint": endpoint_of[run.schedule_id] if attempted else "",
            "due_at": due.strftime("%Y-%m-%d %H:%M:%S.%f"),
            "lag_ms": lag,
            "delivery_ms": produced.delivery_ms.get(run.id, 0),
        }, run.id
        expected_code = {"succeeded": 200, "failed": row["status_code"], "skipped": None}
        assert row["status_code"] == expected_code[run.status]
    flaky = [
        r for r in terminal if r.schedule_id == produced.schedules["flaky"] and r.attempt_count
    ]
    # Each flaky run's 30 ms first attempt was made under an earlier claim than its success.
    assert all(rows[r.id]["delivery_ms"] >= 30 for r in flaky)
    gone = {
        rows[r.id]["status_code"] for r in terminal if r.schedule_id == produced.schedules["gone"]
    }
    assert gone == {404, None}


async def test_queries_answer_from_the_produced_runs(
    produced: Produced, analytics: Analytics
) -> None:
    analytics.publish(r.value for r in produced.records)
    name_of = {v: k for k, v in produced.schedules.items()}

    # Lags are exact under the manual clock: 09:02 ran at 09:03:10 (70 s, fire_once's latest
    # missed occurrence), 09:03 at 09:03:10, 09:04 250 ms late, 09:05 1.5 s late. The manual run
    # of "ok" (lag 0) is left out of the percentiles; with it the median would be 1,500.
    lags = {"lag_p50_ms": 10_000, "lag_p99_ms": 70_000}
    by_schedule = {
        name_of[r.pop("schedule_id")]: r
        for r in analytics.query("success_rate_and_lag_by_schedule_day", tenant_id="", **DAY)
    }
    day = {"day": "2026-03-02"}
    assert by_schedule == {
        "ok": {
            "tenant_id": "ten_a",
            **day,
            "runs": 6,
            "succeeded": 5,
            "failed": 0,
            "skipped": 1,
            "success_rate": 1,
            **lags,
        },
        "flaky": {
            "tenant_id": "ten_a",
            **day,
            "runs": 5,
            "succeeded": 4,
            "failed": 0,
            "skipped": 1,
            "success_rate": 1,
            **lags,
        },
        "broken": {
            "tenant_id": "ten_b",
            **day,
            "runs": 5,
            "succeeded": 0,
            "failed": 4,
            "skipped": 1,
            "success_rate": 0,
            **lags,
        },
        "gone": {
            "tenant_id": "ten_b",
            **day,
            "runs": 5,
            "succeeded": 0,
            "failed": 4,
            "skipped": 1,
            "success_rate": 0,
            **lags,
        },
    }
    tenant_b = analytics.query("success_rate_and_lag_by_schedule_day", tenant_id="ten_b", **DAY)
    assert {name_of[r["schedule_id"]] for r in tenant_b} == {"broken", "gone"}
    next_day = {"from": "2026-03-03 00:00:00", "to": "2026-03-04 00:00:00"}
    assert analytics.query("success_rate_and_lag_by_schedule_day", tenant_id="", **next_day) == []

    failing = analytics.query("top_failing_endpoints", tenant_id="", limit=10, **DAY)
    assert failing == [
        {
            "endpoint": produced.bad,
            "failed_runs": 8,
            "finished_runs": 8,
            "failure_rate": 1,
            "tenants": 1,
            "error_kinds": ["http_status"],
        }
    ]
    assert analytics.query("top_failing_endpoints", tenant_id="ten_a", limit=10, **DAY) == []

    per_tenant = {
        r.pop("tenant_id"): r for r in analytics.query("runs_per_tenant_day", tenant_id="", **DAY)
    }
    for tenant, row in per_tenant.items():
        mine = [r for r in produced.runs if r.tenant_id == tenant]
        assert row == {
            **day,
            "runs": len(mine),
            "counted": sum(r.status != "skipped" for r in mine),
            "succeeded": sum(r.status == "succeeded" for r in mine),
            "failed": sum(r.status == "failed" for r in mine),
            "skipped": sum(r.status == "skipped" for r in mine),
            "attempts": sum(r.attempt_count for r in mine),
            "delivery_ms": sum(produced.delivery_ms.get(r.id, 0) for r in mine),
        }
    assert (per_tenant["ten_a"]["runs"], per_tenant["ten_a"]["attempts"]) == (11, 13)
    assert (per_tenant["ten_b"]["failed"], per_tenant["ten_b"]["skipped"]) == (8, 2)
