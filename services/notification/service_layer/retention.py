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

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol


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
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError("batch_size must be 1..10000")
        if not 1 <= self.max_batches <= 10_000:
            raise ValueError("max_batches must be 1..10000")
        if self.delivery_retention <= timedelta(0) or self.inbox_retention <= timedelta(0):
            raise ValueError("retention periods must be positive")


@dataclass(frozen=True)
class Deleted:
    rows: int
    """Rows of the step's own table (decides whether another batch is needed)."""
    dependents: dict[RetainedTable, int] = field(default_factory=dict)


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


@dataclass
class RetentionReport:
    deleted: dict[RetainedTable, int] = field(default_factory=dict)
    more: bool = False
    """A step hit `max_batches`: old rows remain for the next pass."""

    def add(self, table: RetainedTable, count: int) -> None:
        if count:
            self.deleted[table] = self.deleted.get(table, 0) + count

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


Batch = Callable[[datetime, int], Awaitable[Deleted]]


async def prune_once(
    store: RetentionStore, policy: RetentionPolicy, now: datetime
) -> RetentionReport:
    """One bounded pass. Order matters: rows that others refer to go after them (deliveries
    before their subscription, notifications and emails before their alert request)."""
    deliveries = now - policy.delivery_retention
    inbox = now - policy.inbox_retention
    steps: list[tuple[RetainedTable, Batch, datetime]] = [
        (RetainedTable.WEBHOOK_DELIVERIES, store.delete_finished_deliveries, deliveries),
        (
            RetainedTable.WEBHOOK_DELIVERIES,
            store.delete_deliveries_of_deleted_subscriptions,
            deliveries,
        ),
        (RetainedTable.SUBSCRIPTIONS, store.purge_deleted_subscriptions, deliveries),
        (RetainedTable.NOTIFICATIONS, store.delete_notifications, inbox),
        (RetainedTable.OUTBOUND_EMAILS, store.delete_finished_emails, inbox),
        (RetainedTable.ALERT_REQUESTS, store.delete_alert_requests, inbox),
    ]
    report = RetentionReport()
    for table, batch, cutoff in steps:
        for _ in range(policy.max_batches):
            deleted = await batch(cutoff, policy.batch_size)
            report.add(table, deleted.rows)
            for other, count in deleted.dependents.items():
                report.add(other, count)
            if deleted.rows < policy.batch_size:
                break
        else:
            report.more = True
    return report
