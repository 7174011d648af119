"""Ports: repositories and the unit of work (cosmic-python style).

Contract every implementation keeps:
- Repository methods take the tenant id; another tenant's row is indistinguishable from a missing
  one (None), and a deleted schedule is missing too.
- `ScheduleRepository.save()` writes only when the stored version is the one that was loaded
  (optimistic concurrency) and raises VersionMismatch otherwise.
- `UnitOfWork.commit()` writes every DomainEvent collected from the aggregates the repositories
  returned or added into the outbox, in the same transaction as the state change. Leaving the
  `async with` block without commit() rolls everything back.
- A unique-key violation surfaces as service_layer.errors.DuplicateKey.
(The runs step adds `runs` and `attempts` repositories beside `schedules`.)
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Self

from scheduler.domain.events import DomainEvent
from scheduler.domain.policies import Action, ScheduleState
from scheduler.domain.schedule import Schedule


@dataclass(frozen=True)
class ListFilter:
    state: ScheduleState | None = None
    action: Action | None = None


@dataclass(frozen=True)
class IdempotencyRecord:
    request_hash: str
    schedule_id: str


class ScheduleRepository(abc.ABC):
    def __init__(self) -> None:
        self.seen: dict[str, Schedule] = {}

    async def add(self, schedule: Schedule, secret: str) -> None:
        await self._add(schedule, secret)
        self.seen[schedule.id] = schedule

    async def get(self, tenant_id: str, schedule_id: str) -> Schedule | None:
        schedule = await self._get(tenant_id, schedule_id)
        if schedule is not None:
            self.seen[schedule.id] = schedule
        return schedule

    @abc.abstractmethod
    async def _add(self, schedule: Schedule, secret: str) -> None: ...

    @abc.abstractmethod
    async def _get(self, tenant_id: str, schedule_id: str) -> Schedule | None: ...

    @abc.abstractmethod
    async def save(self, schedule: Schedule) -> None:
        """Persist a loaded schedule's changes; VersionMismatch if someone else wrote first."""

    @abc.abstractmethod
    async def list_page(
        self,
        tenant_id: str,
        *,
        limit: int,
        after: tuple[datetime, str] | None,
        filters: ListFilter,
    ) -> Sequence[Schedule]:
        """Non-deleted schedules ordered by (created_at, id), strictly after `after`."""

    @abc.abstractmethod
    async def count_live(self, tenant_id: str) -> int:
        """Non-deleted schedules of the tenant (what max_schedules counts)."""

    @abc.abstractmethod
    async def secrets(self, tenant_id: str, schedule_id: str, now: datetime) -> list[str]:
        """Plaintext signing secrets, current first, then the previous one while its grace
        period lasts. Empty when the schedule is missing."""

    @abc.abstractmethod
    async def set_secret(
        self,
        tenant_id: str,
        schedule_id: str,
        secret: str,
        *,
        keep_previous_until: datetime | None,
    ) -> None:
        """Store a new current secret; the old current becomes previous until the given instant
        (None drops it at once)."""


class IdempotencyRepository(abc.ABC):
    @abc.abstractmethod
    async def get(self, tenant_id: str, key: str) -> IdempotencyRecord | None: ...

    @abc.abstractmethod
    async def add(
        self, tenant_id: str, key: str, record: IdempotencyRecord, now: datetime
    ) -> None: ...


class UnitOfWork(abc.ABC):
    schedules: ScheduleRepository
    idempotency: IdempotencyRepository

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.rollback()

    async def commit(self) -> None:
        await self._commit(self.collect_new_events())

    def collect_new_events(self) -> list[DomainEvent]:
        events: list[DomainEvent] = []
        for schedule in self.schedules.seen.values():
            events.extend(schedule.events)
            schedule.events.clear()
        return events

    @abc.abstractmethod
    async def _commit(self, events: list[DomainEvent]) -> None:
        """Write the events to the outbox and commit, atomically."""

    @abc.abstractmethod
    async def rollback(self) -> None: ...
