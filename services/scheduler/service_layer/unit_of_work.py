"""The unit of work: ONE port per scheduler transaction (cosmic-python style), carrying every
repository of the scheduler database: `schedules`, `idempotency`, `runs` (the set-based
primitives of the hot path, service_layer/run_ports.py), `tenants` (the tenant projections),
`retention` (batch deletes, service_layer/retention_ports.py), `versions` (reads of schedule
versions, service_layer/version_ports.py) and `ledger` (the ledger's reads and the periodic
check's watermarks, service_layer/ledger_ports.py).

Contract every implementation keeps:
- Schedule and idempotency methods take the tenant id; another tenant's row is indistinguishable
  from a missing one (None), and a deleted schedule is missing too.
- `ScheduleRepository.save()` writes only when the stored version is the one that was loaded
  (or locked) and raises VersionMismatch otherwise.
- `UnitOfWork.commit()` is the one place domain events become outbox rows: the events of every
  aggregate the repositories returned, added or locked, then those given to `add_event()`, in
  the same transaction as the state change (duplicate event ids are ignored). The settle write
  (`RunRepository.settle_leased`) is the one hot-path exception: it writes its completions'
  events in its own statement, with the same row builder.
- `ScheduleRepository.add()` and `save()` write the versions the aggregate recorded
  (domain/versions.py) with its row, attributed to `actor`, the unit of work's: whoever opens one
  that may change a schedule names who acts (`uows(actor)`).
- Leaving the `async with` block without commit() rolls everything back.
- A unique-key violation surfaces as service_layer.errors.DuplicateKey.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Protocol, Self

from scheduler.domain.events import DomainEvent
from scheduler.domain.policies import Action, ScheduleState
from scheduler.domain.schedule import Schedule
from scheduler.domain.tenant import EntitlementsRecord, SuspensionState
from scheduler.domain.versions import Actor
from scheduler.service_layer.flow_ports import DestinationRepository
from scheduler.service_layer.ledger_ports import LedgerRepository
from scheduler.service_layer.retention_ports import RetentionRepository
from scheduler.service_layer.run_ports import RunRepository
from scheduler.service_layer.version_ports import VersionRepository


@dataclass(frozen=True)
class ListFilter:
    state: ScheduleState | None = None
    action: Action | None = None
    labels: tuple[tuple[str, str | None], ...] = ()
    """Every (key, value) must hold: the label equals value, or (value None) is present."""
    key: str | None = None


@dataclass(frozen=True)
class IdempotencyRecord:
    request_hash: str
    schedule_id: str


class ScheduleRepository(abc.ABC):
    def __init__(self) -> None:
        self.seen: dict[str, Schedule] = {}

    async def add(self, schedule: Schedule, secret: str | None) -> None:
        """Insert a new schedule with its signing secret (None: an event schedule, unsigned)."""
        await self._add(schedule, secret)
        self.seen[schedule.id] = schedule

    async def get(self, tenant_id: str, schedule_id: str) -> Schedule | None:
        schedule = await self._get(tenant_id, schedule_id)
        if schedule is not None:
            self.seen[schedule.id] = schedule
        return schedule

    async def get_by_key(self, tenant_id: str, key: str) -> Schedule | None:
        """The tenant's live schedule with this key, tracked like `get()`."""
        schedule = await self._get(tenant_id, None, key=key)
        if schedule is not None:
            self.seen[schedule.id] = schedule
        return schedule

    async def add_many(self, items: Sequence[tuple[Schedule, str | None]]) -> None:
        """`add()` for many schedules at once (apply's creates): one batched insert."""
        await self._add_many(items)
        self.seen.update((s.id, s) for s, _ in items)

    async def by_keys(self, tenant_id: str, keys: Sequence[str]) -> dict[str, Schedule]:
        """The tenant's live schedules with these keys, by key, tracked like `get()`; read in a
        few statements whatever the number of keys."""
        found = await self._by_keys(tenant_id, keys)
        self.seen.update((s.id, s) for s in found.values())
        return found

    async def lock(self, schedule_ids: Sequence[str]) -> dict[str, Schedule]:
        """Live or deleted schedules by id (any tenant: the workers' view), locked until commit
        in id order (so two transactions never deadlock), tracked like `get()`."""
        locked = await self._lock(schedule_ids)
        self.seen.update(locked)
        return locked

    @abc.abstractmethod
    async def _add(self, schedule: Schedule, secret: str | None) -> None: ...

    @abc.abstractmethod
    async def _get(
        self, tenant_id: str, schedule_id: str | None, *, key: str | None = None
    ) -> Schedule | None:
        """By id, or (schedule_id None) by key among the live schedules."""

    @abc.abstractmethod
    async def _lock(self, schedule_ids: Sequence[str]) -> dict[str, Schedule]: ...

    @abc.abstractmethod
    async def _add_many(self, items: Sequence[tuple[Schedule, str | None]]) -> None: ...

    @abc.abstractmethod
    async def _by_keys(self, tenant_id: str, keys: Sequence[str]) -> dict[str, Schedule]: ...

    @abc.abstractmethod
    async def lock_tenant(self, tenant_id: str) -> None:
        """Until commit, the tenant's count-changing schedule writes (create, apply) take turns:
        PostgreSQL a transaction-level advisory lock per tenant, SQLite its one writer lock."""

    @abc.abstractmethod
    async def save(self, schedule: Schedule) -> None:
        """Persist a loaded schedule's changes; VersionMismatch if someone else wrote first."""

    @abc.abstractmethod
    async def save_locked(self, schedules: Sequence[Schedule]) -> None:
        """`save()` for schedules this transaction locked (`lock()`), in a few statements
        whatever their number (the planner completing a herd of one-shots)."""

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
        """Non-deleted, not completed schedules of the tenant (what max_schedules counts)."""

    @abc.abstractmethod
    async def secrets(self, tenant_id: str, schedule_id: str, now: datetime) -> list[str]:
        """Plaintext signing secrets, current first, then the previous one while its grace
        period lasts. Empty when the schedule is missing or has no secret (an event schedule)."""

    @abc.abstractmethod
    async def current_secrets(self, tenant_id: str, schedule_ids: Sequence[str]) -> dict[str, str]:
        """The plaintext current signing secret of each of these schedules that has one, by id
        (a few statements whatever the number)."""

    @abc.abstractmethod
    async def set_secret(
        self,
        tenant_id: str,
        schedule_id: str,
        secret: str | None,
        *,
        keep_previous_until: datetime | None,
    ) -> None:
        """Store a new current secret; the old current becomes previous until the given instant
        (None drops it at once). `secret=None` removes the secret (the schedule became an event
        schedule)."""


class IdempotencyRepository(abc.ABC):
    @abc.abstractmethod
    async def get(self, tenant_id: str, key: str) -> IdempotencyRecord | None: ...

    @abc.abstractmethod
    async def add(
        self, tenant_id: str, key: str, record: IdempotencyRecord, now: datetime
    ) -> None: ...


class TenantRepository(abc.ABC):
    """The tenant projections (`tenant_status`, `tenant_entitlements`, `processed_events`).

    `status` / `entitlements` with `lock=True` lock the row until commit (PostgreSQL: FOR
    UPDATE) so two consumers of one tenant serialise; `insert_*_if_absent` return False when a
    concurrent writer created the row first (the caller then locks and re-applies).
    """

    @abc.abstractmethod
    async def status(self, tenant_id: str, *, lock: bool = False) -> SuspensionState | None: ...

    @abc.abstractmethod
    async def insert_status_if_absent(
        self, tenant_id: str, state: SuspensionState, now: datetime
    ) -> bool: ...

    @abc.abstractmethod
    async def update_status(
        self, tenant_id: str, state: SuspensionState, now: datetime
    ) -> None: ...

    @abc.abstractmethod
    async def entitlements(
        self, tenant_id: str, *, lock: bool = False
    ) -> EntitlementsRecord | None: ...

    @abc.abstractmethod
    async def insert_entitlements_if_absent(
        self, tenant_id: str, record: EntitlementsRecord, now: datetime
    ) -> bool: ...

    @abc.abstractmethod
    async def update_entitlements(
        self, tenant_id: str, record: EntitlementsRecord, now: datetime
    ) -> None: ...

    @abc.abstractmethod
    async def mark_processed(self, event_id: str, now: datetime) -> bool:
        """Record an event id; False if it was already recorded (a duplicate)."""


class UnitOfWork(abc.ABC):
    schedules: ScheduleRepository
    idempotency: IdempotencyRepository
    runs: RunRepository
    destinations: DestinationRepository
    tenants: TenantRepository
    retention: RetentionRepository
    versions: VersionRepository
    ledger: LedgerRepository
    actor: Actor
    """Who this unit of work's schedule changes are attributed to (their versions' author)."""
    _events: list[DomainEvent]

    async def __aenter__(self) -> Self:
        self._events = []
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.rollback()

    def add_event(self, event: DomainEvent) -> None:
        """An event no aggregate records (an alert request), written at commit after theirs."""
        self._events.append(event)

    async def commit(self) -> None:
        await self._commit(self.collect_new_events())

    def collect_new_events(self) -> list[DomainEvent]:
        events: list[DomainEvent] = []
        for schedule in self.schedules.seen.values():
            events.extend(schedule.events)
            schedule.events.clear()
        events.extend(self._events)
        self._events = []
        return events

    @abc.abstractmethod
    async def _commit(self, events: list[DomainEvent]) -> None:
        """Write the events to the outbox and commit, atomically."""

    @abc.abstractmethod
    async def rollback(self) -> None: ...


class UnitOfWorkFactory(Protocol):
    """What the API, the workers and the use cases hold: a fresh unit of work per transaction,
    acting as `actor` (default: `domain.versions.UNATTRIBUTED`, for transactions that change no
    schedule)."""

    def __call__(self, actor: Actor = ...) -> UnitOfWork: ...
