"""The retention worker of `notification serve`: servicekit's `RetentionWorker` running
service_layer/retention.py's bounded pass every NOTIFICATION_RETENTION_INTERVAL_SECONDS and
counting deleted rows in `notification_retention_deleted_total{table}`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from prometheus_client import Counter

from notification.config import NotificationSettings
from notification.service_layer.retention import (
    RetainedTable,
    RetentionPolicy,
    RetentionReport,
    RetentionStore,
    prune_once,
)
from servicekit.data.retention import FIRST_PASS_DELAY_SECONDS, RetentionWorker

log = logging.getLogger(__name__)

RETENTION_DELETED = Counter(
    "notification_retention_deleted", "Rows deleted by retention, by table.", ["table"]
)


def retention_policy(settings: NotificationSettings) -> RetentionPolicy:
    return RetentionPolicy(
        delivery_retention=timedelta(days=settings.delivery_retention_days),
        inbox_retention=timedelta(days=settings.inbox_retention_days),
        batch_size=settings.retention_batch_size,
    )


def retention_worker(
    store: RetentionStore,
    policy: RetentionPolicy,
    clock: Callable[[], datetime],
    *,
    interval_seconds: float,
    first_pass_delay_seconds: float = FIRST_PASS_DELAY_SECONDS,
) -> RetentionWorker[RetainedTable]:
    async def one_pass(now: datetime) -> RetentionReport:
        return await prune_once(store, policy, now)

    return RetentionWorker(
        one_pass,
        clock,
        deleted=RETENTION_DELETED,
        interval_seconds=interval_seconds,
        start_delay_seconds=first_pass_delay_seconds,
        logger=log,
    )
