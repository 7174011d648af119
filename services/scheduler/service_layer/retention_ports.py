"""The unit of work's retention port (service_layer/retention.py prunes through it)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Protocol

from servicekit.data import retention as batching


class RetainedTable(StrEnum):
    """The `table` label of `scheduler_retention_deleted_total`."""

    RUNS = "runs"
    DELIVERY_ATTEMPTS = "delivery_attempts"
    SCHEDULES = "schedules"
    IDEMPOTENCY_KEYS = "idempotency_keys"
    PROCESSED_EVENTS = "processed_events"
    OUTBOX = "outbox"
    SCHEDULE_VERSIONS = "schedule_versions"


Deleted = batching.Deleted[RetainedTable]
"""What one batch removed: `rows` of its own table, `dependents` from others (a run's attempts,
a schedule's keys)."""


class RetentionRepository(Protocol):
    """The unit of work's `retention`: one call = one batch, at most `limit` rows of its table
    (`prune_once` gives each batch a transaction of its own)."""

    async def delete_terminal_runs(self, finished_before: datetime, limit: int) -> Deleted: ...

    async def purge_deleted_schedules(self, deleted_before: datetime, limit: int) -> Deleted: ...

    async def delete_idempotency_keys(self, created_before: datetime, limit: int) -> Deleted: ...

    async def delete_processed_events(self, processed_before: datetime, limit: int) -> Deleted: ...

    async def delete_sent_outbox(self, sent_before: datetime, limit: int) -> Deleted: ...

    async def delete_superseded_versions(
        self, superseded_before: datetime, limit: int
    ) -> Deleted: ...
