"""Schedule version use cases (DESIGN.md §7b): list a schedule's versions, read one, restore one.

Versions stay readable after the schedule is deleted, for as long as retention keeps them (the
delete wrote the last one, state `deleted`); restoring needs a live schedule. A restore is an
update through `update_schedule` (validation, a timing change re-plans, If-Match) to the stored
definition: a new version whose definition equals version n's, whose state is left as it is
(pause and resume are their own changes). Versions hold no secret, so a restore keeps the
current one (a restore that makes an event schedule a webhook generates one, as PATCH does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.domain.definition import ScheduleDefinition
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer.errors import NotFound, VersionMismatch
from scheduler.service_layer.schedules import Clock, SecretFactory, Updated, update_schedule
from scheduler.service_layer.unit_of_work import UnitOfWork
from scheduler.service_layer.version_ports import StoredVersion
from servicekit.data.pagination import InvalidCursor, encode_cursor, parse_cursor


@dataclass(frozen=True)
class VersionPage:
    items: list[StoredVersion]
    next_cursor: str | None


async def list_versions(
    uow: UnitOfWork, *, tenant_id: str, schedule_id: str, limit: int, cursor: str | None
) -> VersionPage:
    """Newest first. Every schedule has at least one version, so an empty first page means no
    such schedule for this tenant (NotFound)."""
    before = _version_of(cursor) if cursor else None
    async with uow:
        rows = await uow.versions.page(tenant_id, schedule_id, limit=limit + 1, before=before)
    if not rows and before is None:
        raise NotFound("schedule", schedule_id)
    items = rows[:limit]
    more = len(rows) > limit
    last = items[-1] if items else None
    next_cursor = encode_cursor(last.at, str(last.version)) if more and last else None
    return VersionPage(items, next_cursor)


async def get_version(
    uow: UnitOfWork, *, tenant_id: str, schedule_id: str, version: int
) -> StoredVersion:
    async with uow:
        found = await uow.versions.get(tenant_id, schedule_id, version)
    if found is None:
        raise NotFound("version", f"{schedule_id}/{version}")
    return found


async def restore_version(
    uows: Callable[[], UnitOfWork],
    *,
    tenant_id: str,
    schedule_id: str,
    version: int,
    expected_version: int | None,
    clock: Clock,
    limits: Entitlements,
    new_secret: SecretFactory,
    check: Callable[[ScheduleDefinition], None] | None = None,
) -> Updated:
    """Apply version `version`'s definition as a new version. Without If-Match a concurrent
    write is retried once against what it wrote; with one, it is a VersionMismatch (412).
    `check`: the edge's own rules on the definition (the target URL's), raising InvalidInput."""
    for attempt in range(2):
        async with uows() as uow:
            stored = await uow.versions.get(tenant_id, schedule_id, version)
            schedule = await uow.schedules.get(tenant_id, schedule_id)
        if schedule is None:
            raise NotFound("schedule", schedule_id)
        if stored is None or stored.definition is None:
            raise NotFound("version", f"{schedule_id}/{version}")
        if expected_version is not None and expected_version != schedule.version:
            raise VersionMismatch(schedule.version)
        if check is not None:
            check(stored.definition)
        try:
            return await update_schedule(
                uows(),
                tenant_id=tenant_id,
                schedule_id=schedule_id,
                changes=schedule.definition.changes_to(stored.definition),
                # The changes are counted from this version: apply them to it alone.
                expected_version=schedule.version,
                clock=clock,
                limits=limits,
                new_secret=new_secret,
            )
        except VersionMismatch:
            if expected_version is not None or attempt == 1:
                raise
    raise AssertionError("unreachable")


MAX_VERSION = 2**31 - 1  # the column's int4


def _version_of(cursor: str) -> int:
    ident = parse_cursor(cursor).id
    if not ident.isdigit() or not 1 <= int(ident) <= MAX_VERSION:
        raise InvalidCursor("not a version cursor")
    return int(ident)


__all__ = ["VersionPage", "get_version", "list_versions", "restore_version"]
