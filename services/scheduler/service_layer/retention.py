"""Retention: every scheduler table stays bounded (DESIGN §5: a deleted schedule's runs are kept
until retention).

What goes, oldest first, in batches of `batch_size` rows per transaction (so a large backlog
never holds long locks) and at most `max_batches` batches per table per pass:

- runs, with their delivery_attempts: terminal (succeeded, failed, skipped) and finished longer
  ago than `SCHEDULER_RUN_RETENTION_DAYS` (90); a skipped run is finished when recorded.
- schedules, with their idempotency keys and versions: soft-deleted longer ago than the run
  retention and no run left (so a deleted schedule's history is kept until retention, DESIGN §5).
- schedule_versions (DESIGN §7b): superseded longer ago than the run retention (so never a
  schedule's latest, and a ledger finds the version in force at any instant the runs cover) and
  cited by no run left (`runs.schedule_version`): versions are kept at least as long as the runs
  that cite them.
- idempotency_keys: created longer ago than `SCHEDULER_IDEMPOTENCY_TTL_SECONDS` (86,400). A
  replay after that creates a new schedule, as with Stripe's 24 h keys.
- processed_events (tenant consumer dedup): older than
  `SCHEDULER_PROCESSED_EVENTS_RETENTION_DAYS` (30); Kafka cannot redeliver such an old record.
- outbox: sent (acknowledged by the bus) longer ago than `SCHEDULER_OUTBOX_RETENTION_SECONDS`
  (604,800: 7 days), kept that long as an audit trail and for replays by hand. Unsent rows are
  the relay's backlog and are never deleted, whatever their age; the relay itself only publishes
  and marks rows sent.

Non-terminal runs (pending, in_progress, retrying) are never deleted, whatever their age. Tenant
projections hold one row per tenant.

Replicas are safe: each batch selects its rows with FOR UPDATE SKIP LOCKED on PostgreSQL, so two
workers take disjoint batches; SQLite has one writer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.service_layer.retention_ports import Deleted, RetainedTable, RetentionRepository
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from servicekit.data import retention as batching
from servicekit.data.retention import PruneStep, check_batching, prune_in_batches

__all__ = [
    "Deleted",
    "RetainedTable",
    "RetentionPolicy",
    "RetentionReport",
    "RetentionRepository",
    "prune_once",
]


@dataclass(frozen=True)
class RetentionPolicy:
    run_retention: timedelta = timedelta(days=90)
    idempotency_ttl: timedelta = timedelta(seconds=86_400)
    processed_events_retention: timedelta = timedelta(days=30)
    outbox_retention: timedelta = timedelta(days=7)
    """Of sent rows only; zero deletes a row as soon as it is sent."""
    batch_size: int = 5_000
    """Rows per transaction (a run batch also deletes those runs' attempts)."""
    max_batches: int = 100
    """Per table per pass: one pass does bounded work; the next pass continues."""

    def __post_init__(self) -> None:
        check_batching(self.batch_size, self.max_batches)
        for name in ("run_retention", "idempotency_ttl", "processed_events_retention"):
            if getattr(self, name) <= timedelta(0):
                raise ValueError(f"{name} must be positive")
        if self.outbox_retention < timedelta(0):
            raise ValueError("outbox_retention must not be negative")


RetentionReport = batching.RetentionReport[RetainedTable]


Batch = Callable[[RetentionRepository, datetime, int], Awaitable[Deleted]]


def _in_own_transaction(
    uows: UnitOfWorkFactory, batch: Batch
) -> Callable[[datetime, int], Awaitable[Deleted]]:
    async def one_batch(cutoff: datetime, limit: int) -> Deleted:
        async with uows() as uow:
            deleted = await batch(uow.retention, cutoff, limit)
            await uow.commit()
        return deleted

    return one_batch


async def prune_once(
    uows: UnitOfWorkFactory, policy: RetentionPolicy, now: datetime
) -> RetentionReport:
    """One bounded pass over every table, each batch in a transaction of its own. Runs go before
    schedules and versions, so a deleted schedule whose last runs expire in this pass is purged
    in the same pass, and so is a version its last citing run expired with."""
    run_cutoff = now - policy.run_retention
    steps = [
        PruneStep(
            RetainedTable.RUNS,
            _in_own_transaction(uows, lambda r, c, n: r.delete_terminal_runs(c, n)),
            run_cutoff,
        ),
        PruneStep(
            RetainedTable.SCHEDULES,
            _in_own_transaction(uows, lambda r, c, n: r.purge_deleted_schedules(c, n)),
            run_cutoff,
        ),
        PruneStep(
            RetainedTable.SCHEDULE_VERSIONS,
            _in_own_transaction(uows, lambda r, c, n: r.delete_superseded_versions(c, n)),
            run_cutoff,
        ),
        PruneStep(
            RetainedTable.IDEMPOTENCY_KEYS,
            _in_own_transaction(uows, lambda r, c, n: r.delete_idempotency_keys(c, n)),
            now - policy.idempotency_ttl,
        ),
        PruneStep(
            RetainedTable.PROCESSED_EVENTS,
            _in_own_transaction(uows, lambda r, c, n: r.delete_processed_events(c, n)),
            now - policy.processed_events_retention,
        ),
        PruneStep(
            RetainedTable.OUTBOX,
            _in_own_transaction(uows, lambda r, c, n: r.delete_sent_outbox(c, n)),
            now - policy.outbox_retention,
        ),
    ]
    return await prune_in_batches(
        steps, batch_size=policy.batch_size, max_batches=policy.max_batches
    )
