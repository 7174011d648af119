"""The retention step of `notification serve` (service_layer/retention.py), shaped for
`workers.run_forever`: it runs a bounded pass when one is due (every
NOTIFICATION_RETENTION_INTERVAL_SECONDS, about a second apart while a backlog remains) and
otherwise returns at once. A failing pass raises, so run_forever logs it and backs off; the pass
stays due. Deleted rows are counted in `notification_retention_deleted_total{table}`."""

from __future__ import annotations

import logging
import time
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

log = logging.getLogger(__name__)

RETENTION_DELETED = Counter(
    "notification_retention_deleted", "Rows deleted by retention, by table.", ["table"]
)
BACKLOG_PAUSE_SECONDS = 1.0
FIRST_PASS_DELAY_SECONDS = 30.0  # start-up (migrations, consumers) goes first


def retention_policy(settings: NotificationSettings) -> RetentionPolicy:
    return RetentionPolicy(
        delivery_retention=timedelta(days=settings.delivery_retention_days),
        inbox_retention=timedelta(days=settings.inbox_retention_days),
        batch_size=settings.retention_batch_size,
    )


class RetentionStep:
    def __init__(
        self,
        store: RetentionStore,
        policy: RetentionPolicy,
        clock: Callable[[], datetime],
        *,
        interval_seconds: float,
        first_pass_delay_seconds: float = FIRST_PASS_DELAY_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.policy = policy
        self.clock = clock
        self.interval_seconds = interval_seconds
        self._monotonic = monotonic
        self._due = monotonic() + min(first_pass_delay_seconds, interval_seconds)
        self.last_report: RetentionReport | None = None

    async def run_once(self) -> int:
        """0 always: run_forever then waits its idle time before asking again."""
        if self._monotonic() < self._due:
            return 0
        report = await prune_once(self.store, self.policy, self.clock())
        self.last_report = report
        for table, count in report.deleted.items():
            RETENTION_DELETED.labels(table=table.value).inc(count)
        if report.total:
            log.info("retention: deleted %s", {t.value: n for t, n in report.deleted.items()})
        pause = BACKLOG_PAUSE_SECONDS if report.more else self.interval_seconds
        self._due = self._monotonic() + pause
        return 0
