"""Fixtures for the run tests: a migrated database (SQLite and PostgreSQL), a container with a
settable clock, its unit-of-work factory, an ASGI client of its API, a loopback receiver and a
schedule factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from pydantic import SecretStr

import webhookdeliver as wd
from authclient import AuthSettings
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container, bootstrap, utc_now
from scheduler.config import SchedulerSettings
from scheduler.domain.definition import Target
from scheduler.domain.policies import (
    Action,
    BreakerPolicy,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
)
from scheduler.domain.schedule import Schedule
from scheduler.domain.tenant import Entitlements
from scheduler.entrypoints.api.app import app_from_container
from scheduler.service_layer import schedules as schedule_svc
from tests.scheduler.conftest import HS256_KEY, SECRET_KEY, T0, ManualClock
from tests.scheduler.definitions import definition

__all__ = ["T0", "ManualClock"]  # re-exported: the run tests import them from here
from tests.scheduler.runs.receiver import Receiver
from tests.support.pg import fresh_postgres_database

SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTAwMA=="


def make_settings(url: str, **overrides: Any) -> SchedulerSettings:
    return SchedulerSettings(
        database_url=url,
        secret_key=SecretStr(SECRET_KEY),
        auth_hs256_key=SecretStr(HS256_KEY),
        webhook_allow_private_networks=True,
        **overrides,
    )


def make_container(url: str, clock: Any) -> Container:
    return bootstrap(
        make_settings(url),
        clock=clock,
        auth_settings=AuthSettings(AUTH_HS256_KEY=SecretStr(HS256_KEY)),
        new_secret=lambda: SECRET,
    )


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh, migrated database per test (own fixture: the run tests also hand the URL to
    worker subprocesses, so they never share a database with another test)."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'scheduler.db'}"
        await upgrade(url)
        yield url
    else:
        async with fresh_postgres_database("runs") as url:
            await upgrade(url)
            yield url


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A fresh migrated PostgreSQL database of the test's own, for tests that run real worker
    processes or proxies against it."""
    async with fresh_postgres_database("runs") as url:
        await upgrade(url)
        yield url


@pytest.fixture
async def real(pg_url: str) -> AsyncIterator[Container]:
    """A container on `pg_url` with the wall clock (real processes share the database)."""
    c = make_container(pg_url, utc_now)
    yield c
    await c.aclose()


@pytest.fixture
def mclock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def container(database_url: str, mclock: ManualClock) -> AsyncIterator[Container]:
    c = make_container(database_url, mclock)
    yield c
    await c.aclose()


@pytest.fixture
def uows(container: Container) -> SqlUnitOfWorkFactory:
    return container.uow_factory


@pytest.fixture
async def client(
    container: Container, uows: SqlUnitOfWorkFactory
) -> AsyncIterator[httpx.AsyncClient]:
    app = app_from_container(container)  # it mounts the runs routes (runs.install_runs)
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://scheduler.test") as c:
            yield c


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    await r.stop()


@pytest.fixture
async def deliverer() -> AsyncIterator[wd.Deliverer]:
    async with wd.Deliverer(allow_private_networks=True) as d:
        yield d  # one real client per test: its connection pool never outlives the loop


async def add_schedule(
    container: Container,
    url: str | None,
    *,
    tenant: str = "tenant-a",
    cron: str = "* * * * *",
    name: str = "every-minute",
    payload: Any = None,
    max_attempts: int = 3,
    initial_backoff: float = 10.0,
    threshold: int = 5,
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE,
    overlap: OverlapPolicy = OverlapPolicy.ALLOW,
    timeout_seconds: int = 10,
    action: Action = Action.WEBHOOK,
    secret: str | None = None,
) -> Schedule:
    spec = definition(
        name=name,
        cron=cron,
        timezone="UTC",
        action=action,
        target=None
        if url is None
        else Target(url=url, headers={}, timeout_seconds=timeout_seconds),
        payload={"job": name} if payload is None else payload,
        retry_policy=RetryPolicy(
            max_attempts=max_attempts,
            initial_backoff_seconds=initial_backoff,
            max_backoff_seconds=max(initial_backoff, 60.0),
            multiplier=2.0,
            max_retry_duration_seconds=86_400.0,
        ),
        misfire_policy=misfire,
        overlap_policy=overlap,
        breaker=BreakerPolicy(failure_threshold=threshold),
    )
    created = await schedule_svc.create_schedule(
        container.uow_factory(),
        spec,
        tenant_id=tenant,
        clock=container.clock,
        new_secret=container.new_secret,
        limits=Entitlements(max_schedules=100_000, min_interval_seconds=60),
        secret=secret,
    )
    return created.schedule
