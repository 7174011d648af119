"""Composition root: builds the concrete adapters once from SchedulerSettings and hands them to
the entrypoints (API app, workers, CLI). Nothing else constructs engines or keys.

Seam for the runs step: `Container.workers` is a list of factories `(container) -> Worker`
(`Worker.run()` loops until cancelled); `scheduler serve --role worker|all` starts each one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from authclient import AuthSettings, TokenVerifier
from scheduler.adapters.db.engine import create_engine, session_factory
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.config import DEV_VAR_DIR, SchedulerSettings
from scheduler.service_layer.schedules import Clock, LimitsProvider, SecretFactory, TenantLimits
from webhookdeliver import generate_secret


def utc_now() -> datetime:
    return datetime.now(UTC)


class Worker(Protocol):
    async def run(self) -> None: ...


WorkerFactory = Callable[["Container"], Worker]


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
    workers: list[WorkerFactory] = field(default_factory=list)

    async def check_database(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def migrate(self) -> None:
        await upgrade(self.settings.database_url)

    async def aclose(self) -> None:
        await self.engine.dispose()


def default_limits(settings: SchedulerSettings) -> LimitsProvider:
    limits = TenantLimits(
        max_schedules=settings.default_max_schedules,
        min_interval_seconds=settings.default_min_interval_seconds,
        max_runs_per_day=settings.default_max_runs_per_day,
        max_payload_bytes=settings.default_max_payload_bytes,
    )
    return lambda _tenant_id: limits


def bootstrap(
    settings: SchedulerSettings | None = None,
    *,
    dev: bool = False,
    var_dir: Path = DEV_VAR_DIR,
    clock: Clock = utc_now,
    auth_settings: AuthSettings | None = None,
    limits_for: LimitsProvider | None = None,
    new_secret: SecretFactory = generate_secret,
    workers: list[WorkerFactory] | None = None,
) -> Container:
    """Build the container. Raises config.MissingSetting (one line naming the variable) when a
    key is missing outside dev mode."""
    settings = (settings or SchedulerSettings()).ensure_keys(dev=dev, var_dir=var_dir)
    if auth_settings is None:
        overrides: dict[str, Any] = {}
        if settings.auth_hs256_key is not None:
            overrides["AUTH_HS256_KEY"] = settings.auth_hs256_key
        auth_settings = AuthSettings(**overrides)
    engine = create_engine(settings.database_url)
    box = SecretBox(settings.encryption_keys())
    return Container(
        settings=settings,
        engine=engine,
        uow_factory=SqlUnitOfWorkFactory(session_factory(engine), box),
        secret_box=box,
        clock=clock,
        auth_settings=auth_settings,
        verifier=TokenVerifier(auth_settings),
        limits_for=limits_for or default_limits(settings),
        new_secret=new_secret,
        workers=list(workers or []),
    )


def rotation_grace(settings: SchedulerSettings) -> timedelta:
    return timedelta(seconds=settings.secret_rotation_grace_seconds)


Startup = Callable[[], Awaitable[None]]
