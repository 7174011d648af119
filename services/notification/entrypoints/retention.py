"""The retention worker of `notification serve` (service_layer/retention.py): a bounded pass
every NOTIFICATION_RETENTION_INTERVAL_SECONDS, about a second apart while a backlog remains.
Deleted rows are counted in `notification_retention_deleted_total{table}`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from prometheus_client import Counter

from notification.config import NotificationSettings
from notification.service_layer.retention import (
    RetentionPolicy,
    RetentionReport,
    RetentionStore,
    prune_once,
)
from servicekit.worker import WorkerLoop

log = logging.getLogger(__name__)

RETENTION_DELETED = Counter(
    "notification_retention_deleted", "Rows deleted by retention, by table.", ["table"]
)
BACKLOG_PAUSE_SECONDS = 1.0
FIRST_PASS_DELAY_SECONDS = 30.0  # start-up (migrations, consumers) goes first
MAX_RETRY_SECONDS = 30.0  # a failed pass (database down) is tried again at least this often


def retention_policy(settings: NotificationSettings) -> RetentionPolicy:
    return RetentionPolicy(
        delivery_retention=timedelta(days=settings.delivery_retention_days),
        inbox_retention=timedelta(days=settings.inbox_retention_days),
        batch_size=settings.retention_batch_size,
    )


class RetentionWorker:
    """The retention loop (a servicekit `WorkerLoop`): the first pass after
    `first_pass_delay_seconds` (at most one interval), then one every `interval_seconds`, about
    a second apart while a backlog remains. A failing pass is logged and tried again after a
    backoff (at most MAX_RETRY_SECONDS)."""

    def __init__(
        self,
        store: RetentionStore,
        policy: RetentionPolicy,
        clock: Callable[[], datetime],
        *,
        interval_seconds: float,
        first_pass_delay_seconds: float = FIRST_PASS_DELAY_SECONDS,
    ) -> None:
        self.store = store
        self.policy = policy
        self.clock = clock
        self.interval_seconds = interval_seconds
        self.last_report: RetentionReport | None = None
        self.loop = WorkerLoop(
            "retention",
            self.step,
            idle_seconds=interval_seconds,
            start_delay_seconds=min(first_pass_delay_seconds, interval_seconds),
            backoff_initial_seconds=min(BACKLOG_PAUSE_SECONDS, MAX_RETRY_SECONDS),
            backoff_max_seconds=MAX_RETRY_SECONDS,
            outage="pass failed",
            logger=log,
        )

    async def run_once(self) -> RetentionReport:
        report = await prune_once(self.store, self.policy, self.clock())
        self.last_report = report
        for table, count in report.deleted.items():
            RETENTION_DELETED.labels(table=table.value).inc(count)
        if report.total:
            log.info("retention: deleted %s", {t.value: n for t, n in report.deleted.items()})
        return report

    async def step(self) -> float:
        """One pass; returns the pause before the next one."""
        report = await self.run_once()
        return BACKLOG_PAUSE_SECONDS if report.more else self.interval_seconds
