"""Schedule versions (DESIGN.md §7b): who changed a schedule, when, and what it was afterwards.

Every change of a schedule's definition or state bumps `Schedule.version` (the ETag) and the
aggregate records a `NewVersion` beside its events: the snapshot after the change, the one
before (None at creation) and whether the signing secret changed (its value never appears).
The repository writes it in the same transaction as the row, attributed to the unit of work's
`Actor`: the token's subject for the API, `system` for the breaker, quota, suspension and the
planner.

A version's `state` is the schedule's, or `deleted` for the version its deletion wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from scheduler.domain.definition import ScheduleDefinition

SYSTEM = "system"
"""The actor of changes no token asked for."""
DELETED = "deleted"
"""A version's state once its schedule was deleted."""
SECRET = "secret"
"""The change-field name of a new signing secret (never its value)."""


class Source(StrEnum):
    """What made a change."""

    API = "api"
    """A tenant's call of the schedule routes."""
    APPLY = "apply"
    """A tenant's `POST /v1/schedules/apply`."""
    BREAKER = "breaker"
    """The breaker paused the schedule after consecutive failures."""
    QUOTA = "quota"
    """Entitlements no longer allow the schedule (a downgrade paused it)."""
    SUSPENSION = "suspension"
    """The tenant was suspended or reinstated."""
    PLANNER = "planner"
    """The planner found no occurrence left: the schedule completed."""


@dataclass(frozen=True)
class Actor:
    """Who a unit of work's changes are attributed to."""

    subject: str
    source: Source

    @classmethod
    def system(cls, source: Source) -> Actor:
        return cls(SYSTEM, source)


UNATTRIBUTED = Actor.system(Source.API)
"""A unit of work opened without an actor (scripts, tests); every production write path names
its own."""


@dataclass(frozen=True)
class Snapshot:
    """What a version records of its schedule."""

    definition: ScheduleDefinition
    state: str
    """`active`, `paused`, `completed`, or DELETED."""
    paused_reason: str | None


@dataclass(frozen=True)
class NewVersion:
    """A version the aggregate recorded and the repository has not written yet."""

    schedule_id: str
    tenant_id: str
    version: int
    at: datetime
    before: Snapshot | None
    """None: the creation."""
    after: Snapshot
    secret_changed: bool = False

    def changed(self) -> tuple[str, ...]:
        """The changed fields by their flat names (a definition's, `state`, `paused_reason`,
        `secret`), sorted; empty for the creation."""
        before, after = self.before, self.after
        if before is None:
            return ()
        names = set(before.definition.changes_to(after.definition))
        if before.state != after.state:
            names.add("state")
        if before.paused_reason != after.paused_reason:
            names.add("paused_reason")
        if self.secret_changed:
            names.add(SECRET)
        return tuple(sorted(names))


__all__ = [
    "DELETED",
    "SECRET",
    "SYSTEM",
    "UNATTRIBUTED",
    "Actor",
    "NewVersion",
    "Snapshot",
    "Source",
]
