"""Fixtures for the event tests: a migrated scheduler database (SQLite file or PostgreSQL),
schedules made through the real service layer and unit of work, and private tansu brokers."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import Publisher
from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import outbox
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.events import OutboxRelay, RelayConfig
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.policies import Action
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer.schedules import (
    create_schedule,
    pause_schedule,
    resume_schedule,
)
from tests.scheduler.conftest import StepClock
from tests.scheduler.definitions import definition
from tests.support.kafka import kafka_bootstrap, tansu_broker  # noqa: F401  (pytest fixtures)

LIMITS = Entitlements(max_schedules=10_000)


@dataclass
class Store:
    """A migrated database and the service-layer calls that write outbox rows."""

    url: str
    engine: AsyncEngine
    uows: SqlUnitOfWorkFactory
    clock: StepClock
    relays: list[OutboxRelay] = field(default_factory=list)

    async def create(self, name: str, tenant: str = "tenant-a", payload: object = None) -> str:
        created = await create_schedule(
            self.uows(),
            definition(
                name=name,
                cron="*/5 * * * *",
                timezone="Europe/Berlin",
                action=Action.EVENT,
                target=None,
                payload=payload,
            ),
            tenant_id=tenant,
            clock=self.clock,
            new_secret=lambda: "whsec_dGVzdA==",
            limits=LIMITS,
        )
        return created.schedule.id

    async def pause(self, schedule_id: str, tenant: str = "tenant-a") -> None:
        await pause_schedule(
            self.uows(),
            tenant_id=tenant,
            schedule_id=schedule_id,
            reason="test",
            expected_version=None,
            clock=self.clock,
        )

    async def resume(self, schedule_id: str, tenant: str = "tenant-a") -> None:
        await resume_schedule(
            self.uows(),
            tenant_id=tenant,
            schedule_id=schedule_id,
            expected_version=None,
            clock=self.clock,
        )

    async def outbox_rows(self) -> list[sa.Row[tuple[object, ...]]]:
        async with self.engine.connect() as conn:
            return list((await conn.execute(sa.select(outbox).order_by(outbox.c.id))).all())

    async def unsent_event_ids(self) -> list[str]:
        return [r.event_id for r in await self.outbox_rows() if r.sent_at is None]

    async def envelopes(self) -> list[dict[str, object]]:
        """Every outbox row's envelope, in id order."""
        return [json.loads(r.payload) for r in await self.outbox_rows()]

    def relay(
        self,
        publisher: Publisher,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        **config: object,
    ) -> OutboxRelay:
        """A relay with its own metrics registry (so tests read only their own values)."""
        relay = OutboxRelay(
            self.engine,
            publisher,
            clock=self.clock,
            config=RelayConfig(**config),  # type: ignore[arg-type]
            registry=CollectorRegistry(),
            monotonic=monotonic,
        )
        self.relays.append(relay)
        return relay


@pytest.fixture
async def store(database_url: str, clock: StepClock) -> AsyncIterator[Store]:
    await upgrade(database_url)
    engine = create_engine(database_url)
    store = Store(
        database_url,
        engine,
        SqlUnitOfWorkFactory(engine, SecretBox([b"k" * 32])),
        clock,
    )
    try:
        yield store
    finally:
        for relay in store.relays:  # a PostgreSQL leader holds a connection and its lock
            await relay.release_leadership()
        await engine.dispose()
