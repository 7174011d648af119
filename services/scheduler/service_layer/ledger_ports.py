"""The unit of work's `ledger` port: the reads the ledger needs (domain/ledger.py) and the
watermarks of the worker's periodic `missing` check (service_layer/ledger_watch.py).

Reads by one schedule take the tenant id (another tenant's schedule has no versions, no runs);
the check's batch reads are the system's, like the planner's, and take schedule ids it claimed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from scheduler.domain.ledger import LedgerRun
from scheduler.domain.timing import Timing


@dataclass(frozen=True)
class StoredSpan:
    """A version with the instants it was in force and its timing."""

    schedule_id: str
    version: int
    at: datetime
    superseded_at: datetime | None
    state: str
    timing: Timing


@dataclass(frozen=True)
class SchedulePosition:
    """The schedule row as the ledger needs it (deleted schedules included)."""

    next_run_at: datetime | None
    deleted_at: datetime | None


@dataclass(frozen=True)
class OtherRun:
    """A run that is not an occurrence: manual, replay or backfill."""

    id: str
    trigger: str
    scheduled_for: datetime
    status: str
    skip_reason: str | None
    schedule_version: int | None


@dataclass(frozen=True)
class Watermark:
    """The periodic check's progress on one schedule: occurrences up to `checked_until` are
    counted."""

    schedule_id: str
    tenant_id: str
    checked_until: datetime


@dataclass(frozen=True)
class SeedStep:
    """One step of the walk that gives schedules their watermark."""

    added: int
    last: str | None
    """The window's last id, where the next step goes on; None: the window reached the end."""


class LedgerRepository(Protocol):
    async def position(self, tenant_id: str, schedule_id: str) -> SchedulePosition | None: ...

    async def has_versions(self, tenant_id: str, schedule_id: str) -> bool: ...

    async def spans(
        self, tenant_id: str, schedule_id: str, start: datetime, end: datetime, limit: int
    ) -> list[StoredSpan]:
        """Versions in force at some instant of [start, end) (`at < end`, `superseded_at >=
        start` or null), in version order, at most `limit`."""
        ...

    async def planned_runs(
        self, tenant_id: str, schedule_id: str, after: datetime, until: datetime, limit: int
    ) -> list[LedgerRun]:
        """Planned runs with scheduled_for in (after, until], in that order, at most `limit`."""
        ...

    async def planned_by_status(
        self, tenant_id: str, schedule_id: str, start: datetime, end: datetime
    ) -> dict[tuple[str, str | None], list[int]]:
        """The planned runs with scheduled_for in [start, end): their instants (whole Unix
        seconds) by (status, skip_reason), read in one statement."""
        ...

    async def other_runs(
        self, tenant_id: str, schedule_id: str, start: datetime, end: datetime, limit: int
    ) -> list[OtherRun]:
        """Manual, replay and backfill runs with scheduled_for in [start, end), at most `limit`."""
        ...

    # ---- the periodic check ----

    async def seed_watermarks(self, since: datetime, after: str, window: int) -> SeedStep:
        """Of the (at most) `window` schedules whose id follows `after`, in id order, give the
        live active ones without a watermark one at max(`since`, their created_at)."""
        ...

    async def claim_watermarks(self, before: datetime, batch: int) -> list[Watermark]:
        """Lock up to `batch` watermarks older than `before`, oldest first, skipping those
        another replica holds."""
        ...

    async def positions(self, schedule_ids: Sequence[str]) -> Mapping[str, SchedulePosition]: ...

    async def spans_of(
        self, schedule_ids: Sequence[str], after: datetime, until: datetime
    ) -> Mapping[str, list[StoredSpan]]:
        """Versions of these schedules in force at some instant of (after, until]."""
        ...

    async def planned_instants(
        self, schedule_ids: Sequence[str], after: datetime, until: datetime
    ) -> Mapping[str, list[datetime]]: ...

    async def advance_watermarks(self, checked_until: Mapping[str, datetime]) -> None:
        """Set each schedule's watermark (one statement)."""
        ...

    async def drop_watermarks(self, schedule_ids: Sequence[str]) -> None: ...


__all__ = [
    "LedgerRepository",
    "OtherRun",
    "SchedulePosition",
    "SeedStep",
    "StoredSpan",
    "Watermark",
]
