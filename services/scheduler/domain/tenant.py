"""Tenant state the scheduler projects from other contexts' events (DESIGN.md §6, §9): suspension
(ADR 0025, topic `platform-events`) and entitlements (ADR 0030, topic `billing-entitlements`).

Pure: no clock, no I/O. The service layer loads the stored projection, calls the functions here
and stores what they return.

Suspension rules (`apply_suspension_event`):
- The projection keeps the newest event by event `time` (never by arrival): an event older than
  the stored one is ignored, so an older event never overrides a newer one.
- Two events with the same `time`: suspension wins (fail closed), so the result does not depend
  on arrival order. A duplicate (same kind, same time) changes nothing.
- `suspended_since` is the start of the latest suspension; it is kept after a reinstatement, so
  the interval [suspended_since, reinstated time) still answers "was the tenant suspended at t"
  for occurrences judged late. Only the latest interval is remembered.
- `is_suspended_at(t)`: suspended now and t >= suspended_since; or reinstated and
  suspended_since <= t < reinstated time. Judged at `scheduled_for` (DESIGN §6); nothing fires
  retroactively on reinstatement: an occurrence inside the interval stays skipped
  `tenant_suspended` whatever its misfire_policy; occurrences after the reinstatement that the
  planner reaches late follow misfire_policy as usual.

Entitlements rules (`apply_entitlements_event`, `Entitlements.with_limits`):
- The newest event by `time` wins as a whole (ties: the larger event id, so order never matters);
  each event states the tenant's limits: a limit it omits takes the configured default, not the
  previous event's value. Unknown keys are ignored; a known key with a value that is not an
  integer in [0, MAX_LIMIT_VALUE] makes the event invalid (InvalidLimits).
- A tenant with no event has the configured defaults (DEFAULT_ENTITLEMENTS).
- `max_schedules` counts live (non-deleted) schedules, paused ones included.
- `check_*` return a QuotaViolation(key, limit, current) or None; `current` is the value the
  request would reach (schedules after creating, the cron's smallest gap, the payload's bytes).
- `max_runs_per_day` counts the tenant's non-skipped runs *created* in the UTC calendar day
  (`quota_day` of their `created_at`): the work the service takes on that day, whatever
  occurrence a run is for. A backfill of past days spends today's runs (not the past days'),
  late runs of a misfire catch-up count the day they are planned, and a run the planner's
  look-ahead creates before midnight for an occurrence after it counts the day it was created.
  Every writer counts and stamps its runs with one `now`, so the day it checks is the day its
  runs land in.

Downgrade (`over_limit`): live schedules ordered by (created_at, id); the oldest
`max_schedules` are within the limit and every *active* schedule after them is over it (the newest
are paused: a downgrade keeps what the tenant set up first). Independently, an active schedule
whose cron's smallest gap is below `min_interval_seconds` or whose payload is above
`max_payload_bytes` is over the limit. Nothing is deleted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

PLATFORM_EVENTS_TOPIC = "platform-events"
BILLING_ENTITLEMENTS_TOPIC = "billing-entitlements"
TENANT_SUSPENDED = "tenant.suspended"
TENANT_REINSTATED = "tenant.reinstated"
ENTITLEMENTS_UPDATED = "entitlements.updated"
PAUSED_REASON_QUOTA = "quota"

# Limits are stored as SQL integers and compared with counts: 2**31 - 1 is the sane ceiling.
MAX_LIMIT_VALUE = 2**31 - 1


def _utc(name: str, value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return value.astimezone(UTC)


# ---- suspension -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SuspensionState:
    """One tenant's row of the suspension projection."""

    suspended: bool
    status_time: datetime
    """Event time of the newest event applied."""
    event_id: str
    """Id of that event (for operators: which event set the current status)."""
    suspended_since: datetime | None
    """Start of the latest suspension (kept after reinstatement); None if never suspended."""

    def is_suspended_at(self, instant: datetime) -> bool:
        if self.suspended_since is None:
            return False
        at = _utc("instant", instant)
        if self.suspended:
            return at >= self.suspended_since
        return self.suspended_since <= at < self.status_time


def apply_suspension_event(
    current: SuspensionState | None, *, suspended: bool, time: datetime, event_id: str
) -> SuspensionState | None:
    """The new state after one `tenant.suspended` (suspended=True) or `tenant.reinstated` event,
    or None when the event changes nothing (older than the stored one, or a duplicate)."""
    at = _utc("time", time)
    if current is not None:
        if at < current.status_time:
            return None
        if at == current.status_time and (current.suspended or not suspended):
            return None  # same instant: suspension wins; same kind: a duplicate
    if suspended:
        since: datetime | None = at
        if current is not None and (current.suspended or current.status_time == at):
            # Still (or, at the same instant as its reinstatement, again) suspended: the
            # suspension began at the earlier start.
            since = current.suspended_since or at
        return SuspensionState(True, at, event_id, since)
    since = current.suspended_since if current is not None else None
    return SuspensionState(False, at, event_id, since)


# ---- entitlements -----------------------------------------------------------------------------


class InvalidLimits(ValueError):
    """An entitlements event carries a limit that is not an integer in [0, MAX_LIMIT_VALUE]."""


@dataclass(frozen=True)
class Entitlements:
    """A tenant's effective limits (units in the names; DESIGN §9 defaults)."""

    max_schedules: int = 100
    min_interval_seconds: int = 60
    max_runs_per_day: int = 10_000
    max_payload_bytes: int = 65_536

    def with_limits(self, limits: Mapping[str, int]) -> Entitlements:
        """These entitlements (the defaults) overlaid with an event's validated limits."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update({k: v for k, v in limits.items() if k in LIMIT_KEYS})
        return Entitlements(**values)

    def as_dict(self) -> dict[str, int]:
        return {f.name: int(getattr(self, f.name)) for f in fields(self)}


DEFAULT_ENTITLEMENTS = Entitlements()
LIMIT_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Entitlements))


def parse_limits(raw: Any) -> dict[str, int]:
    """The known limits of an event's `data.limits`, validated; unknown keys are dropped."""
    if not isinstance(raw, Mapping):
        raise InvalidLimits("limits must be an object")
    out: dict[str, int] = {}
    for key in LIMIT_KEYS:
        if key not in raw:
            continue
        value = raw[key]
        # bool is an int subclass; `true` is not a limit.
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidLimits(f"{key} must be an integer, got {value!r}")
        if not 0 <= value <= MAX_LIMIT_VALUE:
            raise InvalidLimits(f"{key} must be between 0 and {MAX_LIMIT_VALUE}, got {value}")
        out[key] = value
    return out


@dataclass(frozen=True)
class EntitlementsRecord:
    """One tenant's row of the entitlements projection: the newest event's limits as sent."""

    limits: Mapping[str, int]
    event_time: datetime
    event_id: str

    def effective(self, defaults: Entitlements = DEFAULT_ENTITLEMENTS) -> Entitlements:
        return defaults.with_limits(self.limits)


def effective_entitlements(
    record: EntitlementsRecord | None, defaults: Entitlements = DEFAULT_ENTITLEMENTS
) -> Entitlements:
    return defaults if record is None else record.effective(defaults)


def apply_entitlements_event(
    current: EntitlementsRecord | None,
    *,
    limits: Mapping[str, int],
    time: datetime,
    event_id: str,
) -> EntitlementsRecord | None:
    """The new record after an `entitlements.updated`, or None when it changes nothing."""
    at = _utc("time", time)
    if current is not None and (at, event_id) <= (current.event_time, current.event_id):
        return None
    return EntitlementsRecord(dict(limits), at, event_id)


# ---- quota checks -----------------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaViolation:
    key: str
    """The limit's key: max_schedules, min_interval_seconds, max_payload_bytes, ..."""
    limit: int
    current: int


def payload_bytes(payload: Any) -> int:
    """The payload's size as delivered: compact UTF-8 JSON."""
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def check_schedule_count(ent: Entitlements, live_after: int) -> QuotaViolation | None:
    if live_after > ent.max_schedules:
        return QuotaViolation("max_schedules", ent.max_schedules, live_after)
    return None


def check_min_interval(ent: Entitlements, interval_seconds: int) -> QuotaViolation | None:
    if interval_seconds < ent.min_interval_seconds:
        return QuotaViolation("min_interval_seconds", ent.min_interval_seconds, interval_seconds)
    return None


def check_payload_bytes(ent: Entitlements, size: int) -> QuotaViolation | None:
    if size > ent.max_payload_bytes:
        return QuotaViolation("max_payload_bytes", ent.max_payload_bytes, size)
    return None


def quota_day(instant: datetime) -> tuple[datetime, datetime]:
    """The UTC calendar day [start, end) holding `instant`: `max_runs_per_day` counts the runs
    created in the day of `now`."""
    at = _utc("instant", instant)
    start = at.replace(hour=0, minute=0, second=0, microsecond=0)
    return start, start + timedelta(days=1)


def runs_remaining(ent: Entitlements, runs_today: int) -> int:
    return max(0, ent.max_runs_per_day - runs_today)


@dataclass(frozen=True)
class ScheduleUsage:
    """What the downgrade rule needs of one live schedule."""

    schedule_id: str
    created_at: datetime
    active: bool
    payload_bytes: int
    min_interval_seconds: int | None
    """None when not computed (the caller skips it when no limit above the engine's 60 s
    floor applies, or the stored expression no longer parses)."""


def over_limit(ent: Entitlements, live: Sequence[ScheduleUsage]) -> dict[str, QuotaViolation]:
    """Active schedules that the entitlements no longer allow, with the first limit each breaks
    (rules in the module docstring)."""
    ordered = sorted(live, key=lambda s: (_utc("created_at", s.created_at), s.schedule_id))
    out: dict[str, QuotaViolation] = {}
    for rank, s in enumerate(ordered, start=1):
        if not s.active:
            continue
        violation = None
        if rank > ent.max_schedules:
            violation = QuotaViolation("max_schedules", ent.max_schedules, len(ordered))
        elif s.min_interval_seconds is not None:
            violation = check_min_interval(ent, s.min_interval_seconds)
        violation = violation or check_payload_bytes(ent, s.payload_bytes)
        if violation is not None:
            out[s.schedule_id] = violation
    return out
