"""SQL storage of the tenant projections, the unit of work's `tenants` (migration 0003 is the
source of truth; these Table objects sit on the same `metadata` as tables.py so the schema test
covers them).

- `tenant_status`: one row per tenant that ever had a platform event (suspended, status_time,
  event_id, suspended_since).
- `tenant_entitlements`: one row per tenant with an entitlements event; `limits` holds only the
  limits that event carried (the configured defaults fill the rest when read).
- `processed_events`: event ids already applied (consumer dedup), pruned by the retention
  worker (service_layer/retention.py).
- `applied_at` (writer's clock) lets `TenantProjectionCache` re-read only recent changes.

`TenantProjectionCache` gives the synchronous reads the planner, the dispatcher and the API
need (`run_ports.TenantStatus`: `suspended_at`, `entitlements`); it is refreshed from the
database (every `period` and after each applied batch), so another process's changes are seen
within one period.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from scheduler.adapters.db.dialect import dialect_insert, rowcount
from scheduler.adapters.db.tables import metadata, runs
from scheduler.adapters.db.types import JSONText, UTCDateTime
from scheduler.domain.tenant import (
    DEFAULT_ENTITLEMENTS,
    Entitlements,
    EntitlementsRecord,
    SuspensionState,
)
from scheduler.service_layer.unit_of_work import TenantRepository
from servicekit.runtime.worker import WorkerLoop

log = logging.getLogger("scheduler.tenant_store")

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


class SqlTenantRepository(TenantRepository):
    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    def _insert(self, table: sa.Table) -> Any:
        return dialect_insert(self.conn, table)

    async def status(self, tenant_id: str, *, lock: bool = False) -> SuspensionState | None:
        q = sa.select(tenant_status).where(tenant_status.c.tenant_id == tenant_id)
        row = (await self.conn.execute(q.with_for_update() if lock else q)).mappings().first()
        return None if row is None else _status_of(row)

    async def insert_status_if_absent(
        self, tenant_id: str, state: SuspensionState, now: datetime
    ) -> bool:
        stmt = self._insert(tenant_status).values(
            tenant_id=tenant_id, applied_at=now, **_status_row(state)
        )
        result = await self.conn.execute(stmt.on_conflict_do_nothing())
        return rowcount(result) > 0

    async def update_status(self, tenant_id: str, state: SuspensionState, now: datetime) -> None:
        await self.conn.execute(
            sa.update(tenant_status)
            .where(tenant_status.c.tenant_id == tenant_id)
            .values(applied_at=now, **_status_row(state))
        )

    async def entitlements(
        self, tenant_id: str, *, lock: bool = False
    ) -> EntitlementsRecord | None:
        q = sa.select(tenant_entitlements).where(tenant_entitlements.c.tenant_id == tenant_id)
        row = (await self.conn.execute(q.with_for_update() if lock else q)).mappings().first()
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
        result = await self.conn.execute(stmt.on_conflict_do_nothing())
        return rowcount(result) > 0

    async def update_entitlements(
        self, tenant_id: str, record: EntitlementsRecord, now: datetime
    ) -> None:
        await self.conn.execute(
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
        result = await self.conn.execute(stmt.on_conflict_do_nothing())
        return rowcount(result) > 0


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
        self._loop: WorkerLoop | None = None

    # ---- synchronous reads --------------------------------------------------------------
    def suspended_at(self, tenant_id: str, instant: datetime) -> bool:
        state = self._status.get(tenant_id)
        return state is not None and state.is_suspended_at(instant)

    def entitlements(self, tenant_id: str) -> Entitlements:
        return self._entitlements.get(tenant_id, self.defaults)

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
        if self._loop is not None:
            self._loop.stop()

    async def run(self) -> None:
        """Refresh every `period_seconds` until stopped or cancelled (a servicekit
        `WorkerLoop`, new per run, so the cache can be run again); a failed refresh is logged
        and retried one period later (the previous copy keeps answering meanwhile)."""
        self._loop = WorkerLoop(
            "tenant projection cache",
            self._refresh_step,
            idle_seconds=self.period_seconds,
            backoff_initial_seconds=self.period_seconds,
            backoff_max_seconds=self.period_seconds,
            outage="refresh failed",
            logger=log,
        )
        await self._loop.run()

    async def _refresh_step(self) -> float | None:
        await self.refresh()
        return None
