"""The SQL unit of work: ONE AsyncConnection and one transaction per `async with`, Core
statements only; every repository of the scheduler database shares that connection. Commit
writes the collected domain events into the outbox (outbox_rows.py) in the same transaction."""

from __future__ import annotations

from typing import Any, Self

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from scheduler.adapters.db.destinations import SqlDestinationRepository
from scheduler.adapters.db.dialect import dialect_insert
from scheduler.adapters.db.ledger import SqlLedgerStore
from scheduler.adapters.db.outbox_rows import outbox_row
from scheduler.adapters.db.repository import SqlIdempotencyRepository, SqlScheduleRepository
from scheduler.adapters.db.retention_store import SqlRetentionRepository
from scheduler.adapters.db.runs import SqlRunRepository
from scheduler.adapters.db.tables import outbox
from scheduler.adapters.db.tenant_store import SqlTenantRepository
from scheduler.adapters.db.versions import SqlVersionStore
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.events import DomainEvent
from scheduler.domain.versions import UNATTRIBUTED, Actor
from scheduler.service_layer.errors import DuplicateKey
from scheduler.service_layer.unit_of_work import UnitOfWork


class SqlUnitOfWork(UnitOfWork):
    conn: AsyncConnection

    def __init__(self, engine: AsyncEngine, box: SecretBox, actor: Actor = UNATTRIBUTED) -> None:
        self._engine = engine
        self._box = box
        self.actor = actor

    async def __aenter__(self) -> Self:
        self.conn = await self._engine.connect()
        try:
            await self.conn.begin()
        except BaseException:
            await self.conn.close()
            raise
        conn, box = self.conn, self._box
        self.versions = SqlVersionStore(conn, self.actor)
        self.schedules = SqlScheduleRepository(conn, box, self.versions.write)
        self.idempotency = SqlIdempotencyRepository(conn)
        self.runs = SqlRunRepository(conn, box)
        self.destinations = SqlDestinationRepository(conn)
        self.tenants = SqlTenantRepository(conn)
        self.retention = SqlRetentionRepository(conn)
        self.ledger = SqlLedgerStore(conn)
        return await super().__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await super().__aexit__(*exc)
        finally:
            await self.conn.close()

    async def _commit(self, events: list[DomainEvent]) -> None:
        try:
            if events:
                stmt = dialect_insert(self.conn, outbox).on_conflict_do_nothing()
                await self.conn.execute(stmt, [outbox_row(e) for e in events])
            await self.conn.commit()
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc

    async def rollback(self) -> None:
        if self.conn.in_transaction():
            await self.conn.rollback()


class SqlUnitOfWorkFactory:
    """Callable that returns a fresh unit of work (what the API and workers hold)."""

    def __init__(self, engine: AsyncEngine, box: SecretBox) -> None:
        self.engine = engine
        self.box = box

    def __call__(self, actor: Actor = UNATTRIBUTED) -> SqlUnitOfWork:
        return SqlUnitOfWork(self.engine, self.box, actor)
