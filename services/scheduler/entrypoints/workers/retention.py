"""The scheduler's retention worker (one per worker process; replicas safe): servicekit's
`RetentionWorker` running service_layer/retention.py's bounded pass every
`SCHEDULER_RETENTION_INTERVAL_SECONDS` and counting what went in
`scheduler_retention_deleted_total{table}` (`table="outbox"`: sent outbox rows, which the relay
never deletes itself), failed passes in `scheduler_retention_failures_total` and the last pass
that completed in `scheduler_retention_last_success_timestamp_seconds`.

    worker = make_retention_worker(container, registry=registry)
    task = asyncio.create_task(worker.run())
    ...
    worker.stop()   # or cancel the task
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge

from scheduler.bootstrap import Container
from scheduler.config import SchedulerSettings
from scheduler.service_layer.retention import (
    RetainedTable,
    RetentionPolicy,
    RetentionReport,
    prune_once,
)
from scheduler.service_layer.schedules import Clock
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from servicekit.data.retention import FIRST_PASS_DELAY_SECONDS, RetentionWorker

log = logging.getLogger("scheduler.retention")


def retention_policy(settings: SchedulerSettings) -> RetentionPolicy:
    return RetentionPolicy(
        run_retention=timedelta(days=settings.run_retention_days),
        idempotency_ttl=timedelta(seconds=settings.idempotency_ttl_seconds),
        processed_events_retention=timedelta(days=settings.processed_events_retention_days),
        outbox_retention=timedelta(seconds=settings.outbox_retention_seconds),
        batch_size=settings.retention_batch_size,
    )


def retention_worker(
    uows: UnitOfWorkFactory,
    policy: RetentionPolicy,
    clock: Clock,
    *,
    interval_seconds: float = 300.0,
    start_delay_seconds: float = FIRST_PASS_DELAY_SECONDS,
    registry: CollectorRegistry | None = None,
) -> RetentionWorker[RetainedTable]:
    """Its metrics go on `registry` (the runtime's: the /metrics the process serves)."""

    async def one_pass(now: datetime) -> RetentionReport:
        return await prune_once(uows, policy, now)

    return RetentionWorker(
        one_pass,
        clock,
        deleted=Counter(
            "scheduler_retention_deleted",
            "Rows deleted by retention, by table.",
            ["table"],
            registry=registry,
        ),
        failures=Counter(
            "scheduler_retention_failures", "Retention passes that failed.", registry=registry
        ),
        last_success=Gauge(
            "scheduler_retention_last_success_timestamp_seconds",
            "Unix time of the last retention pass that completed.",
            registry=registry,
        ),
        interval_seconds=interval_seconds,
        start_delay_seconds=start_delay_seconds,
        logger=log,
    )


def make_retention_worker(
    container: Container, *, registry: CollectorRegistry | None = None
) -> RetentionWorker[RetainedTable]:
    s = container.settings
    return retention_worker(
        container.uow_factory,
        retention_policy(s),
        container.clock,
        interval_seconds=s.retention_interval_seconds,
        registry=registry,
    )
