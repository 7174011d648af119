"""SQL schedule and idempotency repositories on the unit of work's connection. Every tenant's
query is scoped by tenant_id through `_scoped()`, so another tenant's row is exactly as
invisible as a missing one; `lock()` (the workers' view) reads by id alone. `add()` and `save()`
hand the versions the aggregate recorded to `write_versions` (adapters/db/versions.py) right
after the row, on the same connection: no change without its version, whoever made it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from scheduler.adapters.db.dialect import in_values
from scheduler.adapters.db.tables import KEY_INDEX, idempotency_keys, schedules
from scheduler.adapters.secret_box import NO_SECRET, SecretBox
from scheduler.domain.definition import (
    FIELD_NAMES,
    RunPolicies,
    ScheduleDefinition,
    Target,
)
from scheduler.domain.policies import (
    RESPONSE_COMPLETION,
    Action,
    BreakerPolicy,
    CompletionMode,
    CompletionPolicy,
    DstPolicy,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
    ScheduleState,
    completion_json,
)
from scheduler.domain.schedule import Schedule
from scheduler.domain.timing import Timing
from scheduler.domain.versions import NewVersion
from scheduler.service_layer.errors import DuplicateKey, KeyConflict, VersionMismatch
from scheduler.service_layer.unit_of_work import (
    IdempotencyRecord,
    IdempotencyRepository,
    ListFilter,
    ScheduleRepository,
)
from webhookdeliver import endpoint_key

# Columns written on save(): the definition's and these; the secret columns change only
# through set_secret().
_MUTABLE = (
    *FIELD_NAMES,
    "destination",
    "state",
    "paused_reason",
    "next_run_at",
    "updated_at",
    "deleted_at",
    "version",
    "consecutive_failures",
)
# planned_runs is written only by the planner (an increment in its own statement), so a stale
# aggregate saved by the API can never lower it. next_run_at is written only when the change
# moved it (pause, resume, retime, delete): the planner advances it without bumping the version,
# so an unrelated edit saving the value it read would send the planner back over occurrences.

# Keys or ids per statement of a batch read: within every driver's bound on parameters.
BATCH = 1000
# A tenant's count-changing schedule writes take turns (PostgreSQL: a transaction-level advisory
# lock in the two-int space, namespace apart; two tenants sharing a 32-bit key only wait for
# each other). SQLite: a write first takes the one writer lock for the whole transaction (WAL:
# readers go on), so a read that precedes the writes cannot go stale.
TENANT_SCHEDULES_LOCK_NAMESPACE = 0x5C4E
_LOCK_TENANT_SCHEDULES = sa.text("SELECT pg_advisory_xact_lock(:ns, :key)")
_SQLITE_WRITE_LOCK = sa.text("UPDATE schedules SET tenant_id = tenant_id WHERE 1 = 0")


def tenant_lock_key(tenant_id: str) -> int:
    """The advisory lock key (int4) of a tenant's schedules."""
    digest = hashlib.blake2b(tenant_id.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


# A definition's columns are named by its flat field names (domain/definition.py FIELD_NAMES).
DEFINITION_COLUMNS = tuple(schedules.c[name] for name in FIELD_NAMES)


def definition_to_row(d: ScheduleDefinition) -> dict[str, Any]:
    """The one mapping of a definition to its columns (`definition_from_row` reverses it)."""
    t, p = d.timing, d.policies
    return {
        "name": d.name,
        "description": d.description,
        "action": d.action.value,
        "target": None
        if d.target is None
        else {
            "url": d.target.url,
            "headers": dict(d.target.headers),
            "timeout_seconds": d.target.timeout_seconds,
        },
        "payload": d.payload,
        "timezone": t.timezone,
        "cron": t.cron,
        "run_at": t.run_at,
        "dst_policy": t.dst_policy.value,
        "start_at": t.start_at,
        "end_at": t.end_at,
        "max_runs": t.max_runs,
        "jitter_seconds": t.jitter_seconds,
        "retry_policy": _flat_fields(p.retry_policy),
        "misfire_policy": p.misfire_policy.value,
        "overlap_policy": p.overlap_policy.value,
        "breaker": _flat_fields(p.breaker),
        "completion": completion_json(p.completion),
        "labels": dict(d.labels),
    }


def completion_from_json(stored: Mapping[str, Any] | None) -> CompletionPolicy:
    """`completion_json` reversed; None (rows from before completion callbacks): response."""
    if stored is None:
        return RESPONSE_COMPLETION
    return CompletionPolicy(
        CompletionMode(stored["mode"]),
        stored.get("timeout_seconds"),
        stored.get("min_duration_seconds"),
    )


def _flat_fields(value: Any) -> dict[str, Any]:
    """`dataclasses.asdict` of a dataclass of plain values, at a fifth of its cost (apply maps
    ten thousand definitions in one request)."""
    return {f.name: getattr(value, f.name) for f in fields(value)}


_E = TypeVar("_E", bound=Enum)


def _by_value(enum: type[_E]) -> Mapping[Any, _E]:
    return {member.value: member for member in enum}


# Stored enum values to members: a lookup here is ten times cheaper than Enum(value), and the
# planner maps a thousand rows a pass.
_ACTION, _DST = _by_value(Action), _by_value(DstPolicy)
_MISFIRE, _OVERLAP = _by_value(MisfirePolicy), _by_value(OverlapPolicy)


def definition_from_row(m: Mapping[Any, Any]) -> ScheduleDefinition:
    target = m["target"]
    return ScheduleDefinition(
        name=m["name"],
        description=m["description"],
        action=_ACTION[m["action"]],
        target=None if target is None else Target(**target),
        payload=m["payload"],
        timing=Timing(
            timezone=m["timezone"],
            cron=m["cron"],
            run_at=m["run_at"],
            dst_policy=_DST[m["dst_policy"]],
            start_at=m["start_at"],
            end_at=m["end_at"],
            max_runs=m["max_runs"],
            jitter_seconds=m["jitter_seconds"],
        ),
        policies=_policies(
            m["retry_policy"],
            m["misfire_policy"],
            m["overlap_policy"],
            m["breaker"],
            m.get("completion"),
        ),
        labels=m["labels"],
    )


# Equal policies are one (immutable) object: the schedules of a planner pass share a few sets,
# and looking one up costs a third of building it. Bounded: cleared when full.
_POLICIES: dict[tuple[Any, ...], RunPolicies] = {}
_POLICIES_KEPT = 1024


def _policies(
    retry: Mapping[str, Any],
    misfire: str,
    overlap: str,
    breaker: Mapping[str, Any],
    completion: Mapping[str, Any] | None,
) -> RunPolicies:
    done = () if completion is None else tuple(completion.items())
    key = (*retry.items(), misfire, overlap, *breaker.items(), done)
    found = _POLICIES.get(key)
    if found is None:
        found = RunPolicies(
            retry_policy=RetryPolicy(**retry),
            misfire_policy=_MISFIRE[misfire],
            overlap_policy=_OVERLAP[overlap],
            breaker=BreakerPolicy(**breaker),
            completion=completion_from_json(completion),
        )
        if len(_POLICIES) >= _POLICIES_KEPT:
            _POLICIES.clear()
        _POLICIES[key] = found
    return found


def _destination_of(d: ScheduleDefinition) -> str | None:
    """The flow-control destination (`host:port`) of a webhook schedule's target."""
    return None if d.target is None else endpoint_key(d.target.url)


def schedule_to_row(s: Schedule) -> dict[str, Any]:
    return {
        **definition_to_row(s.definition),
        "id": s.id,
        "tenant_id": s.tenant_id,
        "state": s.state.value,
        "paused_reason": s.paused_reason,
        "next_run_at": s.next_run_at,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "deleted_at": s.deleted_at,
        "version": s.version,
        "consecutive_failures": s.consecutive_failures,
        "destination": _destination_of(s.definition),
        "planned_runs": s.planned_runs,
        "key": s.key,
    }


def row_to_schedule(row: Any) -> Schedule:
    m = row._mapping
    return Schedule(
        id=m["id"],
        tenant_id=m["tenant_id"],
        definition=definition_from_row(m),
        state=ScheduleState(m["state"]),
        paused_reason=m["paused_reason"],
        next_run_at=m["next_run_at"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        deleted_at=m["deleted_at"],
        version=m["version"],
        consecutive_failures=m["consecutive_failures"],
        planned_runs=m["planned_runs"],
        key=m["key"],
    )


_SCHEDULE_COLUMNS = [c for c in schedules.c if not c.name.endswith("secret_ciphertext")]


WriteVersions = Callable[[Sequence[NewVersion]], Awaitable[None]]


class SqlScheduleRepository(ScheduleRepository):
    def __init__(
        self, conn: AsyncConnection, box: SecretBox, write_versions: WriteVersions
    ) -> None:
        super().__init__()
        self.conn = conn
        self.box = box
        self._write_versions = write_versions
        self._loaded_version: dict[str, int] = {}
        self._loaded_next: dict[str, datetime | None] = {}
        self._locked: set[str] = set()

    def _track(self, schedule: Schedule) -> None:
        self._loaded_version[schedule.id] = schedule.version
        self._loaded_next[schedule.id] = schedule.next_run_at

    def _scoped(self, tenant_id: str, *columns: Any) -> sa.Select[Any]:
        return (
            sa.select(*(columns or _SCHEDULE_COLUMNS))
            .where(schedules.c.tenant_id == tenant_id)
            .where(schedules.c.deleted_at.is_(None))
        )

    async def _add(self, schedule: Schedule, secret: str | None) -> None:
        row = schedule_to_row(schedule)
        row["secret_ciphertext"] = self.box.stored(secret, schedule_id=schedule.id)
        try:
            await _execute(self.conn, sa.insert(schedules).values(**row))
        except DuplicateKey as exc:
            # Read by the index's name (PostgreSQL) or its columns (SQLite names no index).
            if schedule.key is not None and _is_key_violation(str(exc)):
                raise KeyConflict(schedule.key) from None
            raise
        await self._drain_versions(schedule)
        self._track(schedule)

    async def _add_many(self, items: Sequence[tuple[Schedule, str | None]]) -> None:
        rows = []
        for schedule, secret in items:
            row = schedule_to_row(schedule)
            row["secret_ciphertext"] = self.box.stored(secret, schedule_id=schedule.id)
            rows.append(row)
        for start in range(0, len(rows), BATCH):
            await _execute(self.conn, sa.insert(schedules), rows[start : start + BATCH])
        await self._write_versions([v for schedule, _ in items for v in schedule.versions])
        for schedule, _ in items:
            schedule.versions.clear()
            self._track(schedule)

    async def _by_keys(self, tenant_id: str, keys: Sequence[str]) -> dict[str, Schedule]:
        wanted = sorted(set(keys))
        found: dict[str, Schedule] = {}
        for start in range(0, len(wanted), BATCH):
            chunk = wanted[start : start + BATCH]
            q = self._scoped(tenant_id).where(in_values(self.conn, schedules.c.key, chunk))
            for row in await self.conn.execute(q):
                schedule = row_to_schedule(row)
                self._track(schedule)
                found[str(schedule.key)] = schedule
        return found

    async def lock_tenant(self, tenant_id: str) -> None:
        if self.conn.dialect.name == "postgresql":
            await self.conn.execute(
                _LOCK_TENANT_SCHEDULES,
                {"ns": TENANT_SCHEDULES_LOCK_NAMESPACE, "key": tenant_lock_key(tenant_id)},
            )
        else:
            await self.conn.execute(_SQLITE_WRITE_LOCK)

    async def current_secrets(self, tenant_id: str, schedule_ids: Sequence[str]) -> dict[str, str]:
        wanted = sorted(set(schedule_ids))
        out: dict[str, str] = {}
        for start in range(0, len(wanted), BATCH):
            chunk = wanted[start : start + BATCH]
            q = self._scoped(tenant_id, schedules.c.id, schedules.c.secret_ciphertext).where(
                in_values(self.conn, schedules.c.id, chunk)
            )
            for schedule_id, stored in await self.conn.execute(q):
                if stored and stored != NO_SECRET:
                    out[schedule_id] = self.box.decrypt(stored, associated=schedule_id)
        return out

    async def _drain_versions(self, schedule: Schedule) -> None:
        await self._write_versions(schedule.versions)
        schedule.versions.clear()

    async def _get(
        self, tenant_id: str, schedule_id: str | None, *, key: str | None = None
    ) -> Schedule | None:
        q = self._scoped(tenant_id)
        if schedule_id is not None:
            q = q.where(schedules.c.id == schedule_id)
        else:
            q = q.where(schedules.c.key == key).where(schedules.c.key.is_not(None))
        result = await self.conn.execute(q)
        row = result.first()
        if row is None:
            return None
        schedule = row_to_schedule(row)
        self._track(schedule)
        return schedule

    async def _lock(self, schedule_ids: Sequence[str]) -> dict[str, Schedule]:
        if not schedule_ids:
            return {}
        q = (
            sa.select(*_SCHEDULE_COLUMNS)
            .where(schedules.c.id.in_(sorted(set(schedule_ids))))
            .order_by(schedules.c.id)
            .with_for_update()
        )
        locked = {s.id: s for s in map(row_to_schedule, await self.conn.execute(q))}
        for schedule in locked.values():
            self._track(schedule)
        self._locked.update(locked)
        return locked

    def _changes(self, schedule: Schedule) -> tuple[int, dict[str, Any]]:
        """The version `schedule` was loaded at, and the columns a save writes."""
        loaded = self._loaded_version.get(schedule.id)
        if loaded is None:
            raise ValueError("save() takes a schedule this repository loaded or added")
        row = schedule_to_row(schedule)
        moved = schedule.next_run_at != self._loaded_next[schedule.id]
        return loaded, {k: row[k] for k in _MUTABLE if k != "next_run_at" or moved}

    async def save(self, schedule: Schedule) -> None:
        loaded, values = self._changes(schedule)
        # Optimistic concurrency: the row changes only if nobody wrote since we read it. On
        # PostgreSQL a concurrent writer blocks here, then sees the new version and matches 0 rows.
        result = await _execute(
            self.conn,
            sa.update(schedules)
            .where(schedules.c.id == schedule.id)
            .where(schedules.c.tenant_id == schedule.tenant_id)
            .where(schedules.c.version == loaded)
            .values(**values),
        )
        if result.rowcount != 1:
            raise VersionMismatch()
        await self._drain_versions(schedule)
        self._track(schedule)

    async def save_locked(self, items: Sequence[Schedule]) -> None:
        if not items:
            return
        if any(s.id not in self._locked for s in items):
            raise ValueError("save_locked() takes schedules this transaction locked")
        # One UPDATE executed for every row (asyncpg pipelines an executemany: one round trip),
        # grouped by the columns written.
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for schedule in items:
            loaded, values = self._changes(schedule)
            params = {f"v_{k}": v for k, v in values.items()}
            params.update(k_id=schedule.id, k_tenant=schedule.tenant_id, k_loaded=loaded)
            groups.setdefault(tuple(values), []).append(params)
        for columns, rows in groups.items():
            stmt = (
                sa.update(schedules)
                .where(schedules.c.id == sa.bindparam("k_id"))
                .where(schedules.c.tenant_id == sa.bindparam("k_tenant"))
                .where(schedules.c.version == sa.bindparam("k_loaded"))
                .values({k: sa.bindparam(f"v_{k}") for k in columns})
            )
            await _execute(self.conn, stmt, rows)
        # The rows are locked, so the version check cannot fail; an executemany reports no row
        # count per row (asyncpg), so a row it missed is found by reading the versions back.
        wanted = {s.id: s.version for s in items}
        ids = sorted(wanted)
        found: dict[str, int] = {}
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            q = sa.select(schedules.c.id, schedules.c.version).where(
                in_values(self.conn, schedules.c.id, chunk)
            )
            found.update((i, v) for i, v in await self.conn.execute(q))
        if found != wanted:
            raise VersionMismatch()
        await self._write_versions([v for s in items for v in s.versions])
        for schedule in items:
            schedule.versions.clear()
            self._track(schedule)

    async def list_page(
        self,
        tenant_id: str,
        *,
        limit: int,
        after: tuple[datetime, str] | None,
        filters: ListFilter,
    ) -> Sequence[Schedule]:
        result = await self.conn.execute(self.page_query(tenant_id, limit, after, filters))
        return [row_to_schedule(r) for r in result]

    def page_query(
        self,
        tenant_id: str,
        limit: int,
        after: tuple[datetime, str] | None,
        filters: ListFilter,
    ) -> sa.Select[Any]:
        """`list_page`'s statement (the EXPLAIN tests read its plan)."""
        q = self._scoped(tenant_id)
        if filters.state is not None:
            q = q.where(schedules.c.state == filters.state.value)
        if filters.action is not None:
            q = q.where(schedules.c.action == filters.action.value)
        if filters.key is not None:
            q = q.where(schedules.c.key == filters.key)
        q = q.where(*self._label_conditions(filters.labels))
        if after is not None:
            at, last_id = after
            q = q.where(
                sa.or_(
                    schedules.c.created_at > at,
                    sa.and_(schedules.c.created_at == at, schedules.c.id > last_id),
                )
            )
        return q.order_by(schedules.c.created_at, schedules.c.id).limit(limit)

    def _label_conditions(
        self, labels: Sequence[tuple[str, str | None]]
    ) -> list[sa.ColumnElement[bool]]:
        if not labels:
            return []
        column = schedules.c.labels
        if self.conn.dialect.name == "postgresql":
            # One containment for every equality, `?` for each presence: both GIN-indexed.
            equal = {k: v for k, v in labels if v is not None}
            out: list[sa.ColumnElement[bool]] = [
                column.op("?", is_comparison=True)(sa.literal(k, sa.Text))
                for k, v in labels
                if v is None
            ]
            if equal:
                out.append(
                    column.op("@>", is_comparison=True)(
                        sa.cast(sa.literal(_json(equal), sa.Text), JSONB)
                    )
                )
            return out
        # SQLite: label keys need no quoting inside a JSON path (their alphabet has no quote).
        conditions: list[sa.ColumnElement[bool]] = []
        for k, v in labels:
            path = f'$."{k}"'
            if v is None:
                conditions.append(sa.func.json_type(column, path).is_not(None))
            else:
                conditions.append(
                    sa.and_(
                        sa.func.json_type(column, path) == "text",
                        sa.func.json_extract(column, path) == v,
                    )
                )
        return conditions

    async def count_live(self, tenant_id: str) -> int:
        # Completed schedules can never fire again: they do not count toward max_schedules.
        result = await self.conn.execute(
            self._scoped(tenant_id, sa.func.count()).where(schedules.c.state != "completed")
        )
        return int(result.scalar_one())

    async def secrets(self, tenant_id: str, schedule_id: str, now: datetime) -> list[str]:
        result = await self.conn.execute(
            self._scoped(
                tenant_id,
                schedules.c.secret_ciphertext,
                schedules.c.previous_secret_ciphertext,
                schedules.c.previous_secret_expires_at,
            ).where(schedules.c.id == schedule_id)
        )
        row = result.first()
        if row is None:
            return []
        return self.box.signing_secrets(schedule_id, row[0], row[1], row[2], now)

    async def set_secret(
        self,
        tenant_id: str,
        schedule_id: str,
        secret: str | None,
        *,
        keep_previous_until: datetime | None,
    ) -> None:
        current = schedules.c.secret_ciphertext
        await _execute(
            self.conn,
            sa.update(schedules)
            .where(schedules.c.id == schedule_id)
            .where(schedules.c.tenant_id == tenant_id)
            .values(
                # SET expressions read the row's old values, so "previous := current" is atomic.
                previous_secret_ciphertext=current if keep_previous_until is not None else None,
                previous_secret_expires_at=keep_previous_until,
                secret_ciphertext=self.box.stored(secret, schedule_id=schedule_id),
            ),
        )


class SqlIdempotencyRepository(IdempotencyRepository):
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def get(self, tenant_id: str, key: str) -> IdempotencyRecord | None:
        result = await self.conn.execute(
            sa.select(idempotency_keys.c.request_hash, idempotency_keys.c.schedule_id)
            .where(idempotency_keys.c.tenant_id == tenant_id)
            .where(idempotency_keys.c.key == key)
        )
        row = result.first()
        return None if row is None else IdempotencyRecord(row[0], row[1])

    async def add(self, tenant_id: str, key: str, record: IdempotencyRecord, now: datetime) -> None:
        await _execute(
            self.conn,
            sa.insert(idempotency_keys).values(
                tenant_id=tenant_id,
                key=key,
                request_hash=record.request_hash,
                schedule_id=record.schedule_id,
                created_at=now,
            ),
        )


def _is_key_violation(message: str) -> bool:
    return KEY_INDEX in message or "schedules.tenant_id, schedules.key" in message


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


async def _execute(conn: AsyncConnection, statement: Any, rows: Any = None) -> Any:
    try:
        return await conn.execute(statement, rows)
    except IntegrityError as exc:
        raise DuplicateKey(str(exc.orig)) from exc
