"""Composition root: builds the concrete adapters once from SchedulerSettings and hands them to
the entrypoints (API app, workers, CLI). Nothing else constructs engines or keys.

Per process: ONE event publisher (`Container.publisher`: Kafka when KAFKA_BOOTSTRAP_SERVERS is
set, else the process's `InProcessBus`, `Container.bus`), shared by the outbox relay and the event
action; and ONE tenant projection cache (`Container.tenants`), read synchronously by the planner,
the dispatcher and the API's limits. `start_tenants()` / `stop_tenants()` are reference-counted so
the API lifespan and the worker runtime of one process can both hold it. And ONE unit-of-work
factory (`Container.uow_factory`), every transaction of the API and the workers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from authclient import AuthSettings, TokenVerifier
from eventbus import InProcessBus, Publisher, make_publisher
from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tenant_store import TenantProjectionCache
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.config import DEV_VAR_DIR, SchedulerSettings
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer import quota
from scheduler.service_layer.schedules import Clock, LimitsProvider, SecretFactory
from webhookdeliver import generate_secret

log = logging.getLogger("scheduler.bootstrap")


def utc_now() -> datetime:
    return datetime.now(UTC)


class Worker(Protocol):
    async def run(self) -> None: ...


@dataclass
class Container:
    settings: SchedulerSettings
    engine: AsyncEngine
    uow_factory: SqlUnitOfWorkFactory
    secret_box: SecretBox
    clock: Clock
    auth_settings: AuthSettings
    verifier: TokenVerifier
    limits_for: LimitsProvider
    new_secret: SecretFactory
    tenants: TenantProjectionCache
    publisher: Publisher
    bus: InProcessBus | None = None
    """The in-process bus the publisher writes to (None with Kafka)."""
    _tenant_holders: int = 0
    _tenant_task: asyncio.Task[None] | None = None

    async def ensure_writable(self, tenant_id: str) -> None:
        """Raise errors.TenantSuspended when the tenant is suspended now (exact: read in a
        transaction of its own, not from the cache)."""
        async with self.uow_factory() as uow:
            await quota.ensure_writable(uow, tenant_id, self.clock())

    async def start_tenants(self) -> None:
        """Load the tenant projections and keep refreshing them (reference-counted)."""
        self._tenant_holders += 1
        if self._tenant_task is not None:
            return
        try:
            await self.tenants.refresh()
        except Exception as exc:  # the refresh loop retries; defaults answer meanwhile
            log.warning("tenant projections not loaded yet (%r); retrying", exc)
        self._tenant_task = asyncio.create_task(self.tenants.run(), name="tenant-cache")

    async def stop_tenants(self) -> None:
        self._tenant_holders = max(0, self._tenant_holders - 1)
        task = self._tenant_task
        if self._tenant_holders or task is None:
            return
        self._tenant_task = None
        # Cancelled, not stop()ped: the cache stays usable (and restartable) by its holders.
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def check_database(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def migrate(self) -> None:
        await upgrade(self.settings.database_url, bounds=self.settings.database_bounds())

    async def aclose(self) -> None:
        if self._tenant_task is not None:
            self._tenant_holders = 1
            await self.stop_tenants()
        await self.engine.dispose()


def default_entitlements(settings: SchedulerSettings) -> Entitlements:
    """Limits of a tenant without an entitlements event (DESIGN §9, configurable)."""
    return Entitlements(
        max_schedules=settings.default_max_schedules,
        min_interval_seconds=settings.default_min_interval_seconds,
        max_runs_per_day=settings.default_max_runs_per_day,
        max_payload_bytes=settings.default_max_payload_bytes,
    )


def bootstrap(
    settings: SchedulerSettings | None = None,
    *,
    dev: bool = False,
    var_dir: Path = DEV_VAR_DIR,
    clock: Clock = utc_now,
    auth_settings: AuthSettings | None = None,
    limits_for: LimitsProvider | None = None,
    new_secret: SecretFactory = generate_secret,
    bus: InProcessBus | None = None,
    publisher: Publisher | None = None,
) -> Container:
    """Build the container. Raises config.MissingSetting (one line naming the variable) when a
    key is missing outside dev mode. Without Kafka the publisher writes to `bus` (a private one
    when not given; the embedded default passes the bus it shares with notification)."""
    settings = (settings or SchedulerSettings()).ensure_keys(dev=dev, var_dir=var_dir)
    if auth_settings is None:
        overrides: dict[str, Any] = {}
        if settings.auth_hs256_key is not None:
            overrides["AUTH_HS256_KEY"] = settings.auth_hs256_key
        auth_settings = AuthSettings(**overrides)
    engine = create_engine(settings.database_url, bounds=settings.database_bounds())
    box = SecretBox(settings.encryption_keys())
    tenants = TenantProjectionCache(engine, default_entitlements(settings))
    if publisher is None:
        if bus is None and not settings.kafka_bootstrap_servers:
            bus = InProcessBus()
        publisher = make_publisher(
            settings.kafka_bootstrap_servers,
            bus,
            idempotent=settings.kafka_idempotent,
            client_id="scheduler",
        )
    return Container(
        settings=settings,
        engine=engine,
        uow_factory=SqlUnitOfWorkFactory(engine, box),
        secret_box=box,
        clock=clock,
        auth_settings=auth_settings,
        verifier=TokenVerifier(auth_settings),
        limits_for=limits_for or tenants.entitlements,
        new_secret=new_secret,
        tenants=tenants,
        publisher=publisher,
        bus=None if settings.kafka_bootstrap_servers else bus,
    )


def rotation_grace(settings: SchedulerSettings) -> timedelta:
    return timedelta(seconds=settings.secret_rotation_grace_seconds)


Startup = Callable[[], Awaitable[None]]
