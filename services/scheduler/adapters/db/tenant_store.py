"""SQL storage of the tenant projections (migration 0003 is the source of truth; these Table
objects sit on the same `metadata` as tables.py so the schema test covers them).

- `tenant_status`: one row per tenant that ever had a platform event (suspended, status_time,
  event_id, suspended_since).
- `tenant_entitlements`: one row per tenant with an entitlements event; `limits` holds only the
  limits that event carried (the configured defaults fill the rest when read).
- `processed_events`: event ids already applied (consumer dedup), pruned after
  PROCESSED_RETENTION.
- `applied_at` (writer's clock) lets `TenantProjectionCache` re-read only recent changes.

`TenantProjectionCache` gives the synchronous reads the planner and dispatcher need
(`run_ports.TenantStatus.suspended_at`) and a `LimitsProvider` (`limits_for`) for the API; it is
refreshed from the database (every `period` and after each applied batch), so another process's
changes are seen within one period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from scheduler.adapters.db.run_tables import runs
from scheduler.adapters.db.tables import metadata
from scheduler.adapters.db.types import JSONText, UTCDateTime
from scheduler.adapters.db.unit_of_work import SqlUnitOfWork, SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.tenant import (
    DEFAULT_ENTITLEMENTS,
    Entitlements,
    EntitlementsRecord,
    SuspensionState,
)
from scheduler.service_layer.schedules import TenantLimits
from scheduler.service_layer.tenant_state import (
    TenantRepository,
    TenantUnitOfWork,
    entitlements_for,
)

log = logging.getLogger("scheduler.tenant_store")

# Kafka keeps records for days (7 by default); an id older than this cannot be redelivered.
PROCESSED_RETENTION = timedelta(days=30)
# Rows re-read on every cache refresh: covers transactions that committed after a later-stamped
# one, and clock skew between writers, up to this long.
CACHE_OVERLAP = timedelta(seconds=60)

tenant_status = sa.Table(
    "tenant_status",
    metadata,
    sa.Column("tenant_id", sa.String(200), primary_key=True),
    sa.Column("suspended", sa.Boolean(), nullable=False),
    sa.Column("status_time", UTCDateTime(), nullable=False),
    sa.Column("event_id", sa.String(100), nullable=False),
    sa.Column("suspended_since", UTCDateTime(), nullable=True),
    sa.Column("applied_at", UTCDateTime(), nullable=False),
)
sa.Index("ix_tenant_status_applied", tenant_status.c.applied_at)

tenant_entitlements = sa.Table(
    "tenant_entitlements",
    metadata,
    sa.Column("tenant_id", sa.String(200), primary_key=True),
    sa.Column("limits", JSONText(), nullable=False),
    sa.Column("event_time", UTCDateTime(), nullable=False),
    sa.Column("event_id", sa.String(100), nullable=False),
    sa.Column("applied_at", UTCDateTime(), nullable=False),
)
sa.Index("ix_tenant_entitlements_applied", tenant_entitlements.c.applied_at)

processed_events = sa.Table(
    "processed_events",
    metadata,
    sa.Column("event_id", sa.String(100), primary_key=True),
    sa.Column("processed_at", UTCDateTime(), nullable=False),
)
sa.Index("ix_processed_events_at", processed_events.c.processed_at)

# Created by migration 0003 on the runs table: max_runs_per_day counts one tenant-day.
sa.Index("ix_runs_tenant_scheduled", runs.c.tenant_id, runs.c.scheduled_for)


def _status_row(state: SuspensionState) -> dict[str, Any]:
    return {
        "suspended": state.suspended,
        "status_time": state.status_time,
        "event_id": state.event_id,
        "suspended_since": state.suspended_since,
    }


def _status_of(row: Mapping[Any, Any]) -> SuspensionState:
    return SuspensionState(
        suspended=bool(row["suspended"]),
        status_time=row["status_time"],
        event_id=row["event_id"],
        suspended_since=row["suspended_since"],
    )


def _entitlements_of(row: Mapping[Any, Any]) -> EntitlementsRecord:
    limits = row["limits"] if isinstance(row["limits"], dict) else {}
    return EntitlementsRecord(
        limits={str(k): int(v) for k, v in limits.items()},
        event_time=row["event_time"],
        event_id=row["event_id"],
    )


def _rowcount(result: Any) -> int:
    return int(result.rowcount or 0)


class SqlTenantRepository(TenantRepository):
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    def _insert(self, table: sa.Table) -> Any:
        dialect = self.session.get_bind().dialect.name
        return (pg_insert if dialect == "postgresql" else sqlite_insert)(table)

    async def status(self, tenant_id: str, *, lock: bool = False) -> SuspensionState | None:
        q = sa.select(tenant_status).where(tenant_status.c.tenant_id == tenant_id)
        row = (await self.session.execute(q.with_for_update() if lock else q)).mappings().first()
        return None if row is None else _status_of(row)

    async def insert_status_if_absent(
        self, tenant_id: str, state: SuspensionState, now: datetime
    ) -> bool:
        stmt = self._insert(tenant_status).values(
            tenant_id=tenant_id, applied_at=now, **_status_row(state)
        )
        result = await self.session.execute(stmt.on_conflict_do_nothing())
        return _rowcount(result) > 0

    async def update_status(self, tenant_id: str, state: SuspensionState, now: datetime) -> None:
        await self.session.execute(
            sa.update(tenant_status)
            .where(tenant_status.c.tenant_id == tenant_id)
            .values(applied_at=now, **_status_row(state))
        )

    async def entitlements(
        self, tenant_id: str, *, lock: bool = False
    ) -> EntitlementsRecord | None:
        q = sa.select(tenant_entitlements).where(tenant_entitlements.c.tenant_id == tenant_id)
        row = (await self.session.execute(q.with_for_update() if lock else q)).mappings().first()
        return None if row is None else _entitlements_of(row)

    async def insert_entitlements_if_absent(
        self, tenant_id: str, record: EntitlementsRecord, now: datetime
    ) -> bool:
        stmt = self._insert(tenant_entitlements).values(
            tenant_id=tenant_id,
            limits=dict(record.limits),
            event_time=record.event_time,
            event_id=record.event_id,
            applied_at=now,
        )
        result = await self.session.execute(stmt.on_conflict_do_nothing())
        return _rowcount(result) > 0

    async def update_entitlements(
        self, tenant_id: str, record: EntitlementsRecord, now: datetime
    ) -> None:
        await self.session.execute(
            sa.update(tenant_entitlements)
            .where(tenant_entitlements.c.tenant_id == tenant_id)
            .values(
                limits=dict(record.limits),
                event_time=record.event_time,
                event_id=record.event_id,
                applied_at=now,
            )
        )

    async def mark_processed(self, event_id: str, now: datetime) -> bool:
        stmt = self._insert(processed_events).values(event_id=event_id, processed_at=now)
        result = await self.session.execute(stmt.on_conflict_do_nothing())
        return _rowcount(result) > 0

    async def prune_processed(self, before: datetime, limit: int) -> int:
        oldest = (
            sa.select(processed_events.c.event_id)
            .where(processed_events.c.processed_at < before)
            .order_by(processed_events.c.processed_at)
            .limit(limit)
        )
        result = await self.session.execute(
            sa.delete(processed_events).where(processed_events.c.event_id.in_(oldest))
        )
        return _rowcount(result)

    async def count_runs(self, tenant_id: str, start: datetime, end: datetime) -> int:
        q = (
            sa.select(sa.func.count())
            .select_from(runs)
            .where(
                runs.c.tenant_id == tenant_id,
                runs.c.scheduled_for >= start,
                runs.c.scheduled_for < end,
                runs.c.status != "skipped",
            )
        )
        return int((await self.session.execute(q)).scalar_one())


class SqlTenantUnitOfWork(SqlUnitOfWork, TenantUnitOfWork):
    """The SQL unit of work with the tenant projections on the same session (one transaction)."""

    async def __aenter__(self) -> Self:
        await super().__aenter__()
        self.tenants = SqlTenantRepository(self.session)
        self.alerts = []
        return self


class SqlTenantUnitOfWorkFactory(SqlUnitOfWorkFactory):
    """A drop-in for Container.uow_factory: its units of work also carry `tenants`."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], box: SecretBox) -> None:
        super().__init__(sessions, box)

    def __call__(self) -> SqlTenantUnitOfWork:
        return SqlTenantUnitOfWork(self.sessions, self.box)


def to_tenant_limits(ent: Entitlements) -> TenantLimits:
    """The schedule use cases' TenantLimits (same fields) from effective entitlements."""
    return TenantLimits(**ent.as_dict())


async def tenant_limits(
    uows: SqlTenantUnitOfWorkFactory,
    tenant_id: str,
    defaults: Entitlements = DEFAULT_ENTITLEMENTS,
) -> TenantLimits:
    """Exact limits from the projection in a transaction of their own (no cache lag)."""
    async with uows() as uow:
        return to_tenant_limits(await entitlements_for(uow, tenant_id, defaults))


async def count_runs_by_tenant(
    conn: AsyncConnection, tenant_ids: Sequence[str], start: datetime, end: datetime
) -> dict[str, int]:
    """Non-skipped runs per tenant with start <= scheduled_for < end, in one query (for the
    planner's max_runs_per_day budget; tenants without runs are absent)."""
    if not tenant_ids:
        return {}
    q = (
        sa.select(runs.c.tenant_id, sa.func.count())
        .where(
            runs.c.tenant_id.in_(sorted(set(tenant_ids))),
            runs.c.scheduled_for >= start,
            runs.c.scheduled_for < end,
            runs.c.status != "skipped",
        )
        .group_by(runs.c.tenant_id)
    )
    return {str(t): int(n) for t, n in (await conn.execute(q)).all()}


class TenantProjectionCache:
    """In-memory copy of both projections for synchronous reads; `refresh()` re-reads the rows
    applied since the last refresh (minus CACHE_OVERLAP). Memory: one small entry per tenant
    that has a projection row."""

    def __init__(
        self,
        engine: AsyncEngine,
        defaults: Entitlements = DEFAULT_ENTITLEMENTS,
        *,
        period_seconds: float = 1.0,
    ) -> None:
        self.engine = engine
        self.defaults = defaults
        self.period_seconds = period_seconds
        self._status: dict[str, SuspensionState] = {}
        self._entitlements: dict[str, Entitlements] = {}
        self._status_mark: datetime | None = None
        self._entitlements_mark: datetime | None = None
        self._stop = asyncio.Event()

    # ---- synchronous reads --------------------------------------------------------------
    def suspended_at(self, tenant_id: str, instant: datetime) -> bool:
        state = self._status.get(tenant_id)
        return state is not None and state.is_suspended_at(instant)

    def entitlements(self, tenant_id: str) -> Entitlements:
        return self._entitlements.get(tenant_id, self.defaults)

    def limits_for(self, tenant_id: str) -> TenantLimits:
        return to_tenant_limits(self.entitlements(tenant_id))

    # ---- refreshing ---------------------------------------------------------------------
    async def refresh(self) -> int:
        """Re-read recently applied rows; returns how many rows were read."""
        async with self.engine.connect() as conn:
            q = sa.select(tenant_status)
            if self._status_mark is not None:
                q = q.where(tenant_status.c.applied_at >= self._status_mark - CACHE_OVERLAP)
            status_rows = (await conn.execute(q)).mappings().all()
            q = sa.select(tenant_entitlements)
            if self._entitlements_mark is not None:
                q = q.where(
                    tenant_entitlements.c.applied_at >= self._entitlements_mark - CACHE_OVERLAP
                )
            ent_rows = (await conn.execute(q)).mappings().all()
        for row in status_rows:
            self._status[row["tenant_id"]] = _status_of(row)
            self._status_mark = max(self._status_mark or row["applied_at"], row["applied_at"])
        for row in ent_rows:
            self._entitlements[row["tenant_id"]] = _entitlements_of(row).effective(self.defaults)
            mark = self._entitlements_mark or row["applied_at"]
            self._entitlements_mark = max(mark, row["applied_at"])
        return len(status_rows) + len(ent_rows)

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Refresh every `period_seconds` until stopped; database errors are logged and retried
        next period (the previous copy keeps answering meanwhile)."""
        while not self._stop.is_set():
            try:
                await self.refresh()
            except (OSError, sa.exc.SQLAlchemyError) as exc:
                log.warning("tenant projection refresh failed (%s); retrying", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.period_seconds)
