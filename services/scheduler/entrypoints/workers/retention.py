"""The retention worker (one per worker process; replicas safe): every
`SCHEDULER_RETENTION_INTERVAL_SECONDS` it runs one bounded pass of service_layer/retention.py and
counts what went in `scheduler_retention_deleted_total{table}` (`table="outbox"`: sent outbox
rows, which the relay never deletes itself). A pass that left rows behind
(a backlog larger than one pass) is followed by another after a short pause instead of a whole
interval. A failed pass (database down) is logged and tried again at the next interval.

    worker = RetentionWorker.from_container(container, registry=registry)
    task = asyncio.create_task(worker.run())
    ...
    worker.stop()   # or cancel the task
"""

from __future__ import annotations

import logging
from datetime import timedelta

from prometheus_client import CollectorRegistry, Counter, Gauge

from scheduler.bootstrap import Container
from scheduler.config import SchedulerSettings
from scheduler.service_layer.retention import (
    RetentionPolicy,
    RetentionReport,
    prune_once,
)
from scheduler.service_layer.schedules import Clock
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from servicekit.worker import WorkerLoop

log = logging.getLogger("scheduler.retention")
BACKLOG_PAUSE_SECONDS = 1.0  # between passes while a backlog remains: lets other writers in


class RetentionMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.deleted = Counter(
            "scheduler_retention_deleted",
            "Rows deleted by retention, by table.",
            ["table"],
            registry=registry,
        )
        self.last_success = Gauge(
            "scheduler_retention_last_success_timestamp_seconds",
            "Unix time of the last retention pass that completed.",
            registry=registry,
        )
        self.failures = Counter(
            "scheduler_retention_failures", "Retention passes that failed.", registry=registry
        )


def retention_policy(settings: SchedulerSettings) -> RetentionPolicy:
    return RetentionPolicy(
        run_retention=timedelta(days=settings.run_retention_days),
        idempotency_ttl=timedelta(seconds=settings.idempotency_ttl_seconds),
        processed_events_retention=timedelta(days=settings.processed_events_retention_days),
        outbox_retention=timedelta(seconds=settings.outbox_retention_seconds),
        batch_size=settings.retention_batch_size,
    )


class RetentionWorker:
    def __init__(
        self,
        uows: UnitOfWorkFactory,
        policy: RetentionPolicy,
        clock: Clock,
        *,
        interval_seconds: float = 300.0,
        start_delay_seconds: float = 30.0,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if interval_seconds <= 0 or start_delay_seconds < 0:
            raise ValueError("interval_seconds must be > 0 and start_delay_seconds >= 0")
        self.uows = uows
        self.policy = policy
        self.clock = clock
        self.interval_seconds = interval_seconds
        self.start_delay_seconds = start_delay_seconds
        self.metrics = RetentionMetrics(registry)
        # A failed pass (database down, a deadlock) is tried again one interval later.
        self.loop = WorkerLoop(
            "retention",
            self.step,
            idle_seconds=interval_seconds,
            start_delay_seconds=start_delay_seconds,
            backoff_initial_seconds=interval_seconds,
            backoff_max_seconds=interval_seconds,
            outage="pass failed",
            logger=log,
        )

    @classmethod
    def from_container(
        cls, container: Container, *, registry: CollectorRegistry | None = None
    ) -> RetentionWorker:
        s = container.settings
        return cls(
            container.uow_factory,
            retention_policy(s),
            container.clock,
            interval_seconds=s.retention_interval_seconds,
            # Start-up (migrations, the planner's catch-up) goes first.
            start_delay_seconds=min(30.0, s.retention_interval_seconds),
            registry=registry,
        )

    async def run_once(self) -> RetentionReport:
        report = await prune_once(self.uows, self.policy, self.clock())
        for table, count in report.deleted.items():
            self.metrics.deleted.labels(table=table.value).inc(count)
        self.metrics.last_success.set(self.clock().timestamp())
        if report.total:
            log.info(
                "retention: deleted %s%s",
                {t.value: n for t, n in report.deleted.items()},
                " (backlog remains)" if report.more else "",
            )
        return report

    async def run(self) -> None:
        """Loop until stop() or cancellation."""
        await self.loop.run()

    def stop(self) -> None:
        self.loop.stop()

    async def step(self) -> float:
        try:
            report = await self.run_once()
        except Exception:
            self.metrics.failures.inc()
            raise
        return (
            min(BACKLOG_PAUSE_SECONDS, self.interval_seconds)
            if report.more
            else self.interval_seconds
        )
