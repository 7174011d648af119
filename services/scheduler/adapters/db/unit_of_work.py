"""The SQL unit of work: one AsyncSession (one transaction) per `async with`; commit writes the
collected domain events into the outbox in that same transaction."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scheduler.adapters.db.repository import SqlIdempotencyRepository, SqlScheduleRepository
from scheduler.adapters.db.tables import outbox
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.events import DomainEvent
from scheduler.service_layer.errors import DuplicateKey
from scheduler.service_layer.unit_of_work import UnitOfWork


def _rfc3339(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat()


def envelope(event: DomainEvent) -> dict[str, Any]:
    """The event envelope of DESIGN §9, as published."""
    out: dict[str, Any] = {
        "id": event.id,
        "type": event.type,
        "tenant_id": event.tenant_id,
        "time": _rfc3339(event.time),
        "schedule_id": event.schedule_id,
        "data": dict(event.data),
    }
    if event.run_id is not None:
        out["run_id"] = event.run_id
    if event.scheduled_for is not None:
        out["scheduled_for"] = _rfc3339(event.scheduled_for)
    return out


def outbox_row(event: DomainEvent) -> dict[str, Any]:
    return {
        "event_id": event.id,
        "topic": event.topic,
        "key": event.key,
        "type": event.type,
        "payload": json.dumps(envelope(event), separators=(",", ":"), ensure_ascii=False),
        "created_at": event.time,
    }


class SqlUnitOfWork(UnitOfWork):
    session: AsyncSession

    def __init__(self, sessions: async_sessionmaker[AsyncSession], box: SecretBox) -> None:
        self._sessions = sessions
        self._box = box

    async def __aenter__(self) -> Self:
        self.session = self._sessions()
        self.schedules = SqlScheduleRepository(self.session, self._box)
        self.idempotency = SqlIdempotencyRepository(self.session)
        return await super().__aenter__()

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await super().__aexit__(*exc)
        finally:
            await self.session.close()

    async def _commit(self, events: list[DomainEvent]) -> None:
        try:
            if events:
                await self.session.execute(sa.insert(outbox), [outbox_row(e) for e in events])
            await self.session.commit()
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc

    async def rollback(self) -> None:
        await self.session.rollback()


class SqlUnitOfWorkFactory:
    """Callable that returns a fresh unit of work (what the API and workers hold)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], box: SecretBox) -> None:
        self.sessions = sessions
        self.box = box

    def __call__(self) -> SqlUnitOfWork:
        return SqlUnitOfWork(self.sessions, self.box)
