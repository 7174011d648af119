"""The Schedule aggregate (DESIGN.md §5): a tenant's declared time trigger.

Plain dataclass, no I/O. State changes go through methods that append DomainEvents to
`self.events`; the unit of work writes them to the outbox in the same transaction.

What the tenant declared is one value, `definition` (domain/definition.py: name, timing, action,
run policies); the aggregate adds its life: state, version, next_run_at, planned_runs.

`next_run_at` is the next occurrence not yet planned. It is computed by the service layer from the
occurrence engine and handed in, so this module stays free of the engine's clock-free but costly
parsing. A paused schedule has `next_run_at = None` (pausing means "no intent", DESIGN §6): resume
recomputes it from the resume instant, so occurrences inside the pause are never planned.

`planned_runs` counts the occurrences planned so far (for the timing's max_runs). A schedule that
can never fire again is `completed` (`complete()`, event `schedule.completed`); a change that
makes occurrences possible again makes it active.

`version` starts at 1 and grows by one on every change: it is the optimistic-concurrency token
(the HTTP ETag) and the SQL repository updates a row only when the stored version matches. Each
bump records a `NewVersion` (domain/versions.py) in `self.versions`, the definition and state it
leaves and what changed since the one before; the repository writes them with the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

from scheduler.domain.definition import ScheduleDefinition
from scheduler.domain.definition import Target as Target  # re-exported for runs/rows.py
from scheduler.domain.events import DomainEvent
from scheduler.domain.policies import ScheduleState
from scheduler.domain.timing import Timing
from scheduler.domain.versions import DELETED, NewVersion, Snapshot
from servicekit.data.ids import new_id
from servicekit.data.timestamps import format_utc

SCHEDULE_COMPLETED = "schedule.completed"
# The fields that decide when a schedule fires; changing one re-plans from now. Jitter is not
# one: it moves a run's due_at, never which occurrences there are.
TIMING_FIELDS = frozenset(f.name for f in fields(Timing)) - {"jitter_seconds"}


class ScheduleError(Exception):
    """Root of the schedule aggregate's errors (the API maps each to a problem)."""


class ScheduleDeleted(ScheduleError):
    """The schedule is deleted; nothing can change it any more."""


class ScheduleCompleted(ScheduleError):
    """The schedule can never fire again, so it cannot be resumed; a PATCH of its timing can
    make occurrences possible again."""


@dataclass
class Schedule:
    id: str
    tenant_id: str
    definition: ScheduleDefinition
    state: ScheduleState
    paused_reason: str | None
    next_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    version: int
    consecutive_failures: int
    deleted_at: datetime | None
    planned_runs: int
    """Occurrences planned so far, skipped ones included (max_runs counts these)."""
    key: str | None = None
    """The tenant's own id for the schedule (DESIGN.md §7b), set when it is created and never
    changed: it addresses the schedule (`PUT /v1/schedules/by-key/{key}`), so it is not part of
    the definition that address takes. Unique among the tenant's live schedules."""
    events: list[DomainEvent] = field(default_factory=list, repr=False, compare=False)
    versions: list[NewVersion] = field(default_factory=list, repr=False, compare=False)
    """Versions recorded and not written yet (the repository drains them on save)."""
    _baseline: Snapshot = field(init=False, repr=False, compare=False)
    """The last version's snapshot: what the next one's changes are counted from."""

    def __post_init__(self) -> None:
        self._baseline = self.snapshot()

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        *,
        id: str,
        tenant_id: str,
        definition: ScheduleDefinition,
        next_run_at: datetime | None,
        now: datetime,
        key: str | None = None,
    ) -> Schedule:
        schedule = cls(
            id=id,
            tenant_id=tenant_id,
            definition=definition,
            state=ScheduleState.ACTIVE,
            paused_reason=None,
            next_run_at=next_run_at,
            created_at=now,
            updated_at=now,
            version=1,
            consecutive_failures=0,
            deleted_at=None,
            planned_runs=0,
            key=key,
        )
        schedule.versions.append(
            NewVersion(id, tenant_id, 1, now, before=None, after=schedule._baseline)
        )
        schedule._record("schedule.created", now)
        return schedule

    # ---- behaviour ----------------------------------------------------------------------------
    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None

    def snapshot(self) -> Snapshot:
        state = DELETED if self.is_deleted else self.state.value
        return Snapshot(self.definition, state, self.paused_reason)

    def update(
        self,
        changes: Mapping[str, Any],
        *,
        next_run_at: datetime | None,
        now: datetime,
        secret_changed: bool = False,
    ) -> None:
        """Apply definition fields by their flat names (already validated); `next_run_at` is what
        the caller computed for the resulting timing (ignored while paused). A completed schedule
        whose timing changed becomes active again when `next_run_at` is not None. A no-op change
        still bumps the version, so a client's If-Match sequence stays simple. `secret_changed`: the
        caller replaced the signing secret too (the event names `secret`, never its value). The
        event's `changed` lists the new version's changed fields."""
        self._ensure_alive()
        self.definition = self.definition.with_changes(changes)
        reopened = (
            self.state is ScheduleState.COMPLETED
            and bool(TIMING_FIELDS & set(changes))
            and next_run_at is not None
        )
        if reopened:
            self.state = ScheduleState.ACTIVE
        if self.state is ScheduleState.ACTIVE:
            self.next_run_at = next_run_at
        version = self._touch(now, secret_changed=secret_changed)
        self._record("schedule.updated", now, {"changed": list(version.changed())})
        if self.state is ScheduleState.ACTIVE and self.next_run_at is None:
            self.complete(now)

    def pause(self, reason: str | None, now: datetime) -> None:
        """Pause (idempotent: pausing a paused schedule only updates the reason). A completed
        schedule has nothing left to pause (the breaker may still see its last runs fail): no-op."""
        self._ensure_alive()
        if self.state is ScheduleState.COMPLETED:
            return
        was_active = self.state is ScheduleState.ACTIVE
        self.state = ScheduleState.PAUSED
        self.paused_reason = reason
        self.next_run_at = None
        self._touch(now)
        if was_active:
            self._record("schedule.paused", now)

    def complete(self, now: datetime) -> None:
        """No occurrence is left (its runs already planned finish normally). Idempotent."""
        self._ensure_alive()
        if self.state is ScheduleState.COMPLETED:
            return
        self.state = ScheduleState.COMPLETED
        self.paused_reason = None
        self.next_run_at = None
        self._touch(now)
        self._record(SCHEDULE_COMPLETED, now)

    def resume(self, next_run_at: datetime | None, now: datetime) -> None:
        """Resume from `now` (the caller passes the next occurrence after now); resets the breaker
        count (DESIGN §6). Resuming an active schedule changes nothing and emits nothing; a
        completed one raises ScheduleCompleted; a paused one with no occurrence left (its bounds
        passed while paused) completes."""
        self._ensure_alive()
        if self.state is ScheduleState.ACTIVE:
            return
        if self.state is ScheduleState.COMPLETED:
            raise ScheduleCompleted(self.id)
        self.state = ScheduleState.ACTIVE
        self.paused_reason = None
        self.consecutive_failures = 0
        self.next_run_at = next_run_at
        self._touch(now)
        self._record("schedule.resumed", now)
        if next_run_at is None:
            self.complete(now)

    def delete(self, now: datetime) -> None:
        self._ensure_alive()
        self.deleted_at = now
        self.next_run_at = None
        self._touch(now)
        self._record("schedule.deleted", now)

    def secret_rotated(self, now: datetime) -> None:
        """The secret itself lives in the adapter (encrypted); the aggregate only versions it."""
        self._ensure_alive()
        self._touch(now, secret_changed=True)

    # ---- internals ----------------------------------------------------------------------------
    def _ensure_alive(self) -> None:
        if self.is_deleted:
            raise ScheduleDeleted(self.id)

    def _touch(self, now: datetime, *, secret_changed: bool = False) -> NewVersion:
        """Bump the version and record it, after the change it versions was made."""
        self.updated_at = now
        self.version += 1
        after = self.snapshot()
        version = NewVersion(
            self.id,
            self.tenant_id,
            self.version,
            now,
            before=self._baseline,
            after=after,
            secret_changed=secret_changed,
        )
        self._baseline = after
        self.versions.append(version)
        return version

    def _record(self, type_: str, now: datetime, extra: Mapping[str, Any] | None = None) -> None:
        definition = self.definition
        timing = definition.timing
        data: dict[str, Any] = {
            "name": definition.name,
            "key": self.key,
            "cron": timing.cron,
            "run_at": None if timing.run_at is None else format_utc(timing.run_at),
            "timezone": timing.timezone,
            "action": definition.action.value,
            "state": self.state.value,
            "paused_reason": self.paused_reason,
            "version": self.version,
        }
        if extra:
            data.update(extra)
        self.events.append(
            DomainEvent(
                id=new_id("evt", at=now),
                type=type_,
                tenant_id=self.tenant_id,
                time=now,
                schedule_id=self.id,
                data=data,
            )
        )

    def copy(self) -> Schedule:
        return replace(self, events=[], versions=[])
