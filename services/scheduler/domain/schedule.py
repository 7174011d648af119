"""The Schedule aggregate (DESIGN.md §5): a tenant's declared time trigger.

Plain dataclass, no I/O. State changes go through methods that append DomainEvents to
`self.events`; the unit of work writes them to the outbox in the same transaction.

`next_run_at` is the next occurrence not yet planned. It is computed by the service layer from the
occurrence engine and handed in, so this module stays free of the engine's clock-free but costly
parsing. A paused schedule has `next_run_at = None` (pausing means "no intent", DESIGN §6): resume
recomputes it from the resume instant, so occurrences inside the pause are never planned.

`version` starts at 1 and grows by one on every change: it is the optimistic-concurrency token
(the HTTP ETag) and the SQL repository updates a row only when the stored version matches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from scheduler.domain.events import DomainEvent
from scheduler.domain.ids import new_id
from scheduler.domain.policies import (
    Action,
    BreakerPolicy,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
    ScheduleState,
)


class ScheduleError(Exception):
    """Root of the schedule aggregate's errors (the API maps each to a problem)."""


class ScheduleDeleted(ScheduleError):
    """The schedule is deleted; nothing can change it any more."""


@dataclass(frozen=True)
class Target:
    """Where a webhook schedule delivers. Headers never contain reserved names (checked at the
    API edge against webhookdeliver.RESERVED_HEADERS)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: int = 10


@dataclass
class Schedule:
    id: str
    tenant_id: str
    name: str
    cron: str
    timezone: str
    action: Action
    target: Target | None
    payload: Any
    retry_policy: RetryPolicy
    misfire_policy: MisfirePolicy
    overlap_policy: OverlapPolicy
    breaker: BreakerPolicy
    state: ScheduleState
    paused_reason: str | None
    next_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    version: int = 1
    consecutive_failures: int = 0
    deleted_at: datetime | None = None
    events: list[DomainEvent] = field(default_factory=list, repr=False, compare=False)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        *,
        id: str,
        tenant_id: str,
        name: str,
        cron: str,
        timezone: str,
        action: Action,
        target: Target | None,
        payload: Any,
        retry_policy: RetryPolicy,
        misfire_policy: MisfirePolicy,
        overlap_policy: OverlapPolicy,
        breaker: BreakerPolicy,
        next_run_at: datetime | None,
        now: datetime,
    ) -> Schedule:
        schedule = cls(
            id=id,
            tenant_id=tenant_id,
            name=name,
            cron=cron,
            timezone=timezone,
            action=action,
            target=target,
            payload=payload,
            retry_policy=retry_policy,
            misfire_policy=misfire_policy,
            overlap_policy=overlap_policy,
            breaker=breaker,
            state=ScheduleState.ACTIVE,
            paused_reason=None,
            next_run_at=next_run_at,
            created_at=now,
            updated_at=now,
        )
        schedule._record("schedule.created", now)
        return schedule

    # ---- behaviour ----------------------------------------------------------------------------
    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None

    def update(
        self, changes: Mapping[str, Any], *, next_run_at: datetime | None, now: datetime
    ) -> None:
        """Apply field changes (already validated); `next_run_at` is what the caller computed for
        the resulting cron/zone (ignored while paused). A no-op change still bumps the version, so
        a client's If-Match sequence stays simple."""
        self._ensure_alive()
        allowed = {
            "name",
            "cron",
            "timezone",
            "action",
            "target",
            "payload",
            "retry_policy",
            "misfire_policy",
            "overlap_policy",
            "breaker",
        }
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        for name, value in changes.items():
            setattr(self, name, value)
        if self.state is ScheduleState.ACTIVE:
            self.next_run_at = next_run_at
        self._touch(now)
        self._record("schedule.updated", now, {"changed": sorted(changes)})

    def pause(self, reason: str | None, now: datetime) -> None:
        """Pause (idempotent: pausing a paused schedule only updates the reason)."""
        self._ensure_alive()
        was_active = self.state is ScheduleState.ACTIVE
        self.state = ScheduleState.PAUSED
        self.paused_reason = reason
        self.next_run_at = None
        self._touch(now)
        if was_active:
            self._record("schedule.paused", now)

    def resume(self, next_run_at: datetime | None, now: datetime) -> None:
        """Resume from `now` (the caller passes the next occurrence after now); resets the breaker
        count (DESIGN §6). Resuming an active schedule changes nothing and emits nothing."""
        self._ensure_alive()
        if self.state is ScheduleState.ACTIVE:
            return
        self.state = ScheduleState.ACTIVE
        self.paused_reason = None
        self.consecutive_failures = 0
        self.next_run_at = next_run_at
        self._touch(now)
        self._record("schedule.resumed", now)

    def delete(self, now: datetime) -> None:
        self._ensure_alive()
        self.deleted_at = now
        self.next_run_at = None
        self._touch(now)
        self._record("schedule.deleted", now)

    def secret_rotated(self, now: datetime) -> None:
        """The secret itself lives in the adapter (encrypted); the aggregate only versions it."""
        self._ensure_alive()
        self._touch(now)

    # ---- internals ----------------------------------------------------------------------------
    def _ensure_alive(self) -> None:
        if self.is_deleted:
            raise ScheduleDeleted(self.id)

    def _touch(self, now: datetime) -> None:
        self.updated_at = now
        self.version += 1

    def _record(self, type_: str, now: datetime, extra: Mapping[str, Any] | None = None) -> None:
        data: dict[str, Any] = {
            "name": self.name,
            "cron": self.cron,
            "timezone": self.timezone,
            "action": self.action.value,
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
        return replace(self, events=[])
