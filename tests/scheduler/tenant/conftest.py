"""Tenant-state fixtures: the tenant unit of work on a migrated database (SQLite and PostgreSQL,
from tests/scheduler/conftest.py's `database_url`), a settable clock and event builders."""

from __future__ import annotations

import base64
import itertools
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import envelope
from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.tables import outbox
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.definition import Target
from scheduler.domain.policies import Action
from scheduler.domain.schedule import Schedule
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer import schedules as schedule_svc
from tests.scheduler.conftest import T0, ManualClock
from tests.scheduler.definitions import definition

__all__ = ["T0", "ManualClock"]  # re-exported: the tenant tests import them from here

SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()
_ids = itertools.count(1)


@pytest.fixture
def mclock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    e = create_engine(database_url)
    yield e
    await e.dispose()


@pytest.fixture
def uows(engine: AsyncEngine) -> SqlUnitOfWorkFactory:
    return SqlUnitOfWorkFactory(engine, SecretBox([base64.urlsafe_b64decode(b"k" * 43 + b"=")]))


def event_id() -> str:
    return f"evt_test_{next(_ids):06d}"


def platform_event(
    kind: str, tenant: str, at: datetime, *, id_: str | None = None
) -> dict[str, Any]:
    return envelope(id=id_ or event_id(), type=f"tenant.{kind}", tenant_id=tenant, time=at, data={})


def entitlements_event(
    tenant: str, at: datetime, limits: dict[str, Any], *, id_: str | None = None
) -> dict[str, Any]:
    return envelope(
        id=id_ or event_id(),
        type="entitlements.updated",
        tenant_id=tenant,
        time=at,
        data={"limits": limits},
    )


async def add_schedule(
    uows: SqlUnitOfWorkFactory,
    clock: ManualClock,
    *,
    tenant: str = "tenant-a",
    name: str = "s",
    cron: str = "*/5 * * * *",
    payload: Any = None,
    limits: Entitlements | None = None,
) -> Schedule:
    spec = definition(
        name=name,
        cron=cron,
        timezone="UTC",
        action=Action.WEBHOOK,
        target=Target(url="https://example.com/hook", headers={}, timeout_seconds=10),
        payload={"job": name} if payload is None else payload,
    )
    created = await schedule_svc.create_schedule(
        uows(),
        spec,
        tenant_id=tenant,
        clock=clock,
        new_secret=lambda: SECRET,
        limits=limits or Entitlements(max_schedules=10_000),
    )
    clock.advance(seconds=1)  # distinct created_at: the downgrade orders by it
    return created.schedule


async def outbox_rows(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = (await conn.execute(sa.select(outbox).order_by(outbox.c.id))).mappings().all()
    return [dict(r) for r in rows]
