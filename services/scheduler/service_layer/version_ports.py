"""The unit of work's `versions` port: reads of a schedule's stored versions (domain/versions.py).
Writes need no call: the schedule repository writes the versions an aggregate recorded with its
row, attributed to the unit of work's actor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from scheduler.domain.definition import ScheduleDefinition
from scheduler.domain.versions import Actor


@dataclass(frozen=True)
class StoredVersion:
    schedule_id: str
    version: int
    at: datetime
    actor: Actor
    state: str
    """`active`, `paused`, `completed` or `deleted`."""
    paused_reason: str | None
    changes: Sequence[Mapping[str, Any]]
    """[{"field", "from", "to"}] in JSON values; a new secret is {"field": "secret"} alone."""
    definition: ScheduleDefinition | None = None
    """Read by `get` only (a list page leaves it None)."""


class VersionRepository(Protocol):
    """Every method is scoped by tenant: another tenant's schedule has no versions."""

    async def page(
        self, tenant_id: str, schedule_id: str, *, limit: int, before: int | None
    ) -> list[StoredVersion]:
        """Newest first, versions below `before` (None: from the latest)."""
        ...

    async def get(self, tenant_id: str, schedule_id: str, version: int) -> StoredVersion | None:
        """One version with its definition."""
        ...


__all__ = ["StoredVersion", "VersionRepository"]
