"""The retention worker: settings reach the policy, `serve`'s runtime runs it, its loop prunes
and counts `scheduler_retention_deleted_total{table}`, and a failed pass neither kills the loop
nor goes unseen."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.tables import runs
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.bootstrap import retention_policy, retention_worker
from scheduler.config import SchedulerSettings
from scheduler.entrypoints.workers.runtime import WorkerRuntime
from scheduler.service_layer.retention import RetentionPolicy
from tests.scheduler.conftest import SECRET_KEY, StepClock
from tests.scheduler.retention.conftest import (
    DAY,
    NOW,
    add_outbox,
    add_runs,
    add_schedule,
    count,
)
from tests.scheduler.runs.processes import wait_until
from tests.scheduler.schedules.conftest import make_container

WAIT_SECONDS = 15.0


async def until(probe: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    await wait_until(probe, WAIT_SECONDS, what, every=0.02)


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDULER_RUN_RETENTION_DAYS", "30")
    monkeypatch.setenv("SCHEDULER_IDEMPOTENCY_TTL_SECONDS", "3600")
    monkeypatch.setenv("SCHEDULER_PROCESSED_EVENTS_RETENTION_DAYS", "14")
    monkeypatch.setenv("SCHEDULER_OUTBOX_RETENTION_SECONDS", "7200")
    monkeypatch.setenv("SCHEDULER_RETENTION_BATCH_SIZE", "100")
    monkeypatch.setenv("SCHEDULER_RETENTION_INTERVAL_SECONDS", "60")
    settings = SchedulerSettings(secret_key=SecretStr(SECRET_KEY))
    assert retention_policy(settings) == RetentionPolicy(
        run_retention=timedelta(days=30),
        idempotency_ttl=timedelta(hours=1),
        processed_events_retention=timedelta(days=14),
        outbox_retention=timedelta(hours=2),
        batch_size=100,
    )
    assert settings.retention_interval_seconds == 60


def test_defaults() -> None:
    defaults = retention_policy(SchedulerSettings())
    assert defaults.run_retention == timedelta(days=90)
    assert defaults.idempotency_ttl == timedelta(seconds=86_400)
    assert defaults.outbox_retention == timedelta(days=7)
    assert defaults.batch_size == 5_000


@pytest.mark.parametrize("bad", ["0", "-1"])
def test_run_retention_below_one_day_is_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    # Less than a day would delete today's runs, which count toward max_runs_per_day.
    monkeypatch.setenv("SCHEDULER_RUN_RETENTION_DAYS", bad)
    with pytest.raises(ValueError, match="SCHEDULER_RUN_RETENTION_DAYS"):
        SchedulerSettings()


async def test_serve_runtime_runs_retention_and_a_bare_runtime_does_not(
    database_url: str,
) -> None:
    container = make_container(database_url, StepClock())
    try:
        served = WorkerRuntime.from_container(container)
        bare = WorkerRuntime(container)
        assert served.retention is not None
        assert bare.retention is None
        # Its counter is on the runtime's registry, i.e. the /metrics the process serves.
        assert served.registry.get_sample_value("scheduler_retention_failures_total") == 0.0
        await served.deliverer.close()
        await bare.deliverer.close()
    finally:
        await container.aclose()


async def test_loop_prunes_and_counts_by_table(engine: AsyncEngine) -> None:
    await add_schedule(engine, "sch_a")
    await add_runs(engine, "sch_a", 7, status="failed", finished_at=NOW - 100 * DAY, attempts=3)
    await add_outbox(engine, "sent", 4, sent_at=NOW - 8 * DAY)
    registry = CollectorRegistry()
    worker = retention_worker(
        SqlUnitOfWorkFactory(engine, SecretBox([b"k" * 32])),
        RetentionPolicy(batch_size=5),
        lambda: NOW,
        interval_seconds=3600,
        start_delay_seconds=0,
        registry=registry,
    )
    task = asyncio.create_task(worker.run())
    try:
        await until(lambda: _is_zero(engine), "the old runs to be pruned")

        def deleted(table: str) -> float | None:
            return registry.get_sample_value("scheduler_retention_deleted_total", {"table": table})

        await until(lambda: deleted("runs") == 7, "the counter")
        assert deleted("delivery_attempts") == 21
        assert deleted("outbox") == 4
        assert (
            registry.get_sample_value("scheduler_retention_last_success_timestamp_seconds")
            == NOW.timestamp()
        )
    finally:
        worker.stop()
        await asyncio.wait_for(task, 5)  # stop() ends the loop promptly, mid-interval


async def test_a_failed_pass_is_counted_and_the_loop_lives_on(tmp_path: Path) -> None:
    # A real failure: a database without the schema ("no such table").
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")
    registry = CollectorRegistry()
    worker = retention_worker(
        SqlUnitOfWorkFactory(engine, SecretBox([b"k" * 32])),
        RetentionPolicy(),
        lambda: NOW,
        interval_seconds=3600,
        start_delay_seconds=0,
        registry=registry,
    )
    task = asyncio.create_task(worker.run())
    try:
        await until(
            lambda: registry.get_sample_value("scheduler_retention_failures_total") == 1,
            "the failure to be counted",
        )
        assert not task.done()
    finally:
        worker.stop()
        await asyncio.wait_for(task, 5)
        await engine.dispose()


async def _is_zero(engine: AsyncEngine) -> bool:
    return await count(engine, runs) == 0
