"""Retention: every notification table stays bounded.

What goes, oldest first, in batches of `batch_size` rows per transaction and at most
`max_batches` batches per step per pass (a pass does bounded work; the next continues):

- webhook_deliveries, with their attempts: terminal (succeeded or dead) and finished longer ago
  than `NOTIFICATION_DELIVERY_RETENTION_DAYS` (30). Pending and retrying ones stay. A replayed
  delivery is pending again (finished_at cleared), so it stays until it finishes anew.
- deliveries of a subscription deleted longer ago than the delivery retention, whatever their
  state: a deleted subscription is never delivered to again. Then the subscription row itself.
- notifications (the in-app inbox): created longer ago than
  `NOTIFICATION_INBOX_RETENTION_DAYS` (90), read or not.
- outbound_emails: sent or failed, created longer ago than the inbox retention.
- alert_requests (the alert dedup ids): older than the inbox retention and no notification or
  email left that refers to them.

The fan-out dedup key is the delivery row itself (unique event id + subscription): an event
re-read after its deliveries were pruned would fan out again, which needs a broker keeping
records longer than the delivery retention (Kafka's default is 7 days; keep it below 30).
Replicas are safe: batches select with FOR UPDATE SKIP LOCKED on PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from servicekit.data import retention as batching
from servicekit.data.retention import PruneStep, check_batching, prune_in_batches


class RetainedTable(StrEnum):
    """The `table` label of `notification_retention_deleted_total`."""

    WEBHOOK_DELIVERIES = "webhook_deliveries"
    DELIVERY_ATTEMPTS = "delivery_attempts"
    SUBSCRIPTIONS = "subscriptions"
    NOTIFICATIONS = "notifications"
    OUTBOUND_EMAILS = "outbound_emails"
    ALERT_REQUESTS = "alert_requests"


@dataclass(frozen=True)
class RetentionPolicy:
    delivery_retention: timedelta = timedelta(days=30)
    inbox_retention: timedelta = timedelta(days=90)
    batch_size: int = 5_000
    max_batches: int = 100

    def __post_init__(self) -> None:
        check_batching(self.batch_size, self.max_batches)
        if self.delivery_retention <= timedelta(0) or self.inbox_retention <= timedelta(0):
            raise ValueError("retention periods must be positive")


Deleted = batching.Deleted[RetainedTable]
"""What one batch removed: `rows` of its own table, `dependents` from others (a delivery's
attempts)."""


class RetentionStore(Protocol):
    """One call = one batch in one transaction, at most `limit` rows of its table."""

    async def delete_finished_deliveries(self, before: datetime, limit: int) -> Deleted: ...

    async def delete_deliveries_of_deleted_subscriptions(
        self, deleted_before: datetime, limit: int
    ) -> Deleted: ...

    async def purge_deleted_subscriptions(
        self, deleted_before: datetime, limit: int
    ) -> Deleted: ...

    async def delete_notifications(self, before: datetime, limit: int) -> Deleted: ...

    async def delete_finished_emails(self, before: datetime, limit: int) -> Deleted: ...

    async def delete_alert_requests(self, before: datetime, limit: int) -> Deleted: ...


RetentionReport = batching.RetentionReport[RetainedTable]


async def prune_once(
    store: RetentionStore, policy: RetentionPolicy, now: datetime
) -> RetentionReport:
    """One bounded pass. Order matters: rows that others refer to go after them (deliveries
    before their subscription, notifications and emails before their alert request)."""
    deliveries = now - policy.delivery_retention
    inbox = now - policy.inbox_retention
    steps = [
        PruneStep(RetainedTable.WEBHOOK_DELIVERIES, store.delete_finished_deliveries, deliveries),
        PruneStep(
            RetainedTable.WEBHOOK_DELIVERIES,
            store.delete_deliveries_of_deleted_subscriptions,
            deliveries,
        ),
        PruneStep(RetainedTable.SUBSCRIPTIONS, store.purge_deleted_subscriptions, deliveries),
        PruneStep(RetainedTable.NOTIFICATIONS, store.delete_notifications, inbox),
        PruneStep(RetainedTable.OUTBOUND_EMAILS, store.delete_finished_emails, inbox),
        PruneStep(RetainedTable.ALERT_REQUESTS, store.delete_alert_requests, inbox),
    ]
    return await prune_in_batches(
        steps, batch_size=policy.batch_size, max_batches=policy.max_batches
    )
