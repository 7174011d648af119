"""Retention: every scheduler table stays bounded (DESIGN §5: a deleted schedule's runs are kept
until retention).

What goes, oldest first, in batches of `batch_size` rows per transaction (so a large backlog
never holds long locks) and at most `max_batches` batches per table per pass:

- runs, with their delivery_attempts: terminal (succeeded, failed, skipped) and finished longer
  ago than `SCHEDULER_RUN_RETENTION_DAYS` (90); a skipped run is finished when recorded.
- schedules, with their idempotency keys: soft-deleted longer ago than the run retention and no
  run left (so a deleted schedule's history is kept until retention, DESIGN §5).
- idempotency_keys: created longer ago than `SCHEDULER_IDEMPOTENCY_TTL_SECONDS` (86,400). A
  replay after that creates a new schedule, as with Stripe's 24 h keys.
- processed_events (tenant consumer dedup): older than
  `SCHEDULER_PROCESSED_EVENTS_RETENTION_DAYS` (30); Kafka cannot redeliver such an old record.

Non-terminal runs (pending, in_progress, retrying) are never deleted, whatever their age. The
outbox prunes itself (outbox relay, 7 days). Tenant projections hold one row per tenant.

Replicas are safe: each batch selects its rows with FOR UPDATE SKIP LOCKED on PostgreSQL, so two
workers take disjoint batches; SQLite has one writer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol


class RetainedTable(StrEnum):
    """The `table` label of `scheduler_retention_deleted_total`."""

    RUNS = "runs"
    DELIVERY_ATTEMPTS = "delivery_attempts"
    SCHEDULES = "schedules"
    IDEMPOTENCY_KEYS = "idempotency_keys"
    PROCESSED_EVENTS = "processed_events"


@dataclass(frozen=True)
class RetentionPolicy:
    run_retention: timedelta = timedelta(days=90)
    idempotency_ttl: timedelta = timedelta(seconds=86_400)
    processed_events_retention: timedelta = timedelta(days=30)
    batch_size: int = 5_000
    """Rows per transaction (a run batch also deletes those runs' attempts)."""
    max_batches: int = 100
    """Per table per pass: one pass does bounded work; the next pass continues."""

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError("batch_size must be 1..10000")
        if not 1 <= self.max_batches <= 10_000:
            raise ValueError("max_batches must be 1..10000")
        for name in ("run_retention", "idempotency_ttl", "processed_events_retention"):
            if getattr(self, name) <= timedelta(0):
                raise ValueError(f"{name} must be positive")


@dataclass(frozen=True)
class Deleted:
    """What one batch removed."""

    rows: int
    """Rows of the batch's own table (decides whether another batch is needed)."""
    dependents: dict[RetainedTable, int] = field(default_factory=dict)
    """Rows removed with them from other tables (a run's attempts, a schedule's keys)."""


class RetentionStore(Protocol):
    """One call = one batch in one transaction, at most `limit` rows of its table."""

    async def delete_terminal_runs(self, finished_before: datetime, limit: int) -> Deleted: ...

    async def purge_deleted_schedules(self, deleted_before: datetime, limit: int) -> Deleted: ...

    async def delete_idempotency_keys(self, created_before: datetime, limit: int) -> Deleted: ...

    async def delete_processed_events(self, processed_before: datetime, limit: int) -> Deleted: ...


@dataclass
class RetentionReport:
    deleted: dict[RetainedTable, int] = field(default_factory=dict)
    batches: int = 0
    more: bool = False
    """A table hit `max_batches`: rows older than the cutoff remain for the next pass."""

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
    """One bounded pass over every table. Runs go before schedules, so a deleted schedule whose
    last runs expire in this pass is purged in the same pass."""
    report = RetentionReport()
    steps: list[tuple[RetainedTable, Batch, datetime]] = [
        (RetainedTable.RUNS, store.delete_terminal_runs, now - policy.run_retention),
        (RetainedTable.SCHEDULES, store.purge_deleted_schedules, now - policy.run_retention),
        (
            RetainedTable.IDEMPOTENCY_KEYS,
            store.delete_idempotency_keys,
            now - policy.idempotency_ttl,
        ),
        (
            RetainedTable.PROCESSED_EVENTS,
            store.delete_processed_events,
            now - policy.processed_events_retention,
        ),
    ]
    for table, batch, cutoff in steps:
        for _ in range(policy.max_batches):
            deleted = await batch(cutoff, policy.batch_size)
            report.batches += 1
            report.add(table, deleted.rows)
            for other, count in deleted.dependents.items():
                report.add(other, count)
            if deleted.rows < policy.batch_size:
                break
        else:
            report.more = True
    return report
