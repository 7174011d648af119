"""SQL side of schedule versions (domain/versions.py, table `schedule_versions`).

`SqlVersionStore.write` is called by the schedule repository with the versions an aggregate
recorded, right after its row is written, so both are in one transaction: it marks the previous
latest version superseded and inserts the new ones (one UPDATE, one INSERT per save). The
definition is stored in the API's shape (the table's flat field names, instants as RFC 3339), so
a version reads back without the schedules table and a change's `from` / `to` are what the API
showed; a secret is never among them (a new one is `{"field": "secret"}`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from scheduler.adapters.db.repository import definition_from_row, definition_to_row
from scheduler.adapters.db.tables import schedule_versions
from scheduler.domain.definition import ScheduleDefinition
from scheduler.domain.versions import SECRET, Actor, NewVersion, Snapshot, Source
from scheduler.service_layer.version_ports import StoredVersion
from servicekit.data.timestamps import format_utc

# The definition's instants: stored as RFC 3339 text in the JSON snapshot.
_INSTANTS = ("run_at", "start_at", "end_at")
MAX_ACTOR_CHARS = 255  # the column's size; a longer token subject is cut, never refused
_LIST_COLUMNS = [c for c in schedule_versions.c if c.name != "definition"]


def definition_json(d: ScheduleDefinition) -> dict[str, Any]:
    """The definition as the API shows it, by flat field name."""
    row = definition_to_row(d)
    for name in _INSTANTS:
        if row[name] is not None:
            row[name] = format_utc(row[name])
    return row


def definition_from_json(stored: Mapping[str, Any]) -> ScheduleDefinition:
    row = dict(stored)
    for name in _INSTANTS:
        if row[name] is not None:
            row[name] = datetime.fromisoformat(row[name])
    return definition_from_row(row)


def _state_json(s: Snapshot) -> dict[str, Any]:
    return {"state": s.state, "paused_reason": s.paused_reason}


def _changes(v: NewVersion, after: Mapping[str, Any]) -> list[dict[str, Any]]:
    if v.before is None:
        return []
    before = {**definition_json(v.before.definition), **_state_json(v.before)}
    return [
        {"field": name}
        if name == SECRET
        else {"field": name, "from": before[name], "to": after[name]}
        for name in v.changed()
    ]


class SqlVersionStore:
    def __init__(self, conn: AsyncConnection, actor: Actor) -> None:
        self.conn = conn
        self.actor = actor

    async def write(self, versions: Sequence[NewVersion]) -> None:
        """Store new versions (of one or many schedules: apply creates thousands at once), each
        schedule's oldest first; each but a schedule's last is superseded by its next at once (a
        change that completes the schedule too writes two). One INSERT for all of them."""
        if not versions:
            return
        by_schedule: dict[str, list[NewVersion]] = {}
        for v in versions:
            by_schedule.setdefault(v.schedule_id, []).append(v)
        rows: list[dict[str, Any]] = []
        superseding: list[dict[str, Any]] = []
        for own in by_schedule.values():
            first = own[0]
            if first.before is not None:
                superseding.append(
                    {"k_schedule": first.schedule_id, "k_version": first.version, "k_at": first.at}
                )
            rows.extend(
                self._row(v, own[i + 1].at if i + 1 < len(own) else None) for i, v in enumerate(own)
            )
        if superseding:  # one statement executed per schedule (asyncpg pipelines them)
            await self.conn.execute(
                sa.update(schedule_versions)
                .where(schedule_versions.c.schedule_id == sa.bindparam("k_schedule"))
                .where(schedule_versions.c.superseded_at.is_(None))
                .where(schedule_versions.c.version < sa.bindparam("k_version"))
                .values(superseded_at=sa.bindparam("k_at")),
                superseding,
            )
        await self.conn.execute(sa.insert(schedule_versions), rows)

    def _row(self, v: NewVersion, superseded_at: datetime | None) -> dict[str, Any]:
        definition = definition_json(v.after.definition)
        return {
            "schedule_id": v.schedule_id,
            "version": v.version,
            "tenant_id": v.tenant_id,
            "at": v.at,
            "superseded_at": superseded_at,
            "actor": self.actor.subject[:MAX_ACTOR_CHARS],
            "source": self.actor.source.value,
            "state": v.after.state,
            "paused_reason": v.after.paused_reason,
            "definition": definition,
            "changes": _changes(v, {**definition, **_state_json(v.after)}),
        }

    async def page(
        self, tenant_id: str, schedule_id: str, *, limit: int, before: int | None
    ) -> list[StoredVersion]:
        q = sa.select(*_LIST_COLUMNS).where(*_scope(tenant_id, schedule_id))
        if before is not None:
            q = q.where(schedule_versions.c.version < before)
        q = q.order_by(schedule_versions.c.version.desc()).limit(limit)
        return [_stored(r._mapping) for r in await self.conn.execute(q)]

    async def get(self, tenant_id: str, schedule_id: str, version: int) -> StoredVersion | None:
        q = (
            sa.select(schedule_versions)
            .where(*_scope(tenant_id, schedule_id))
            .where(schedule_versions.c.version == version)
        )
        row = (await self.conn.execute(q)).first()
        if row is None:
            return None
        m = row._mapping
        return _stored(m, definition_from_json(m["definition"]))


def _scope(tenant_id: str, schedule_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        schedule_versions.c.schedule_id == schedule_id,
        schedule_versions.c.tenant_id == tenant_id,
    )


def _stored(m: Mapping[Any, Any], definition: ScheduleDefinition | None = None) -> StoredVersion:
    return StoredVersion(
        schedule_id=m["schedule_id"],
        version=m["version"],
        at=m["at"],
        actor=Actor(m["actor"], Source(m["source"])),
        state=m["state"],
        paused_reason=m["paused_reason"],
        changes=m["changes"],
        definition=definition,
    )


__all__ = ["SqlVersionStore", "definition_from_json", "definition_json"]
