"""Shared scheduler fixtures: a migrated, empty database per backend (SQLite file, PostgreSQL via
tests/support/pg.py), a deterministic clock, and tokens."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from authclient import mint_token
from scheduler.adapters.db.migrate import upgrade
from tests.support.pg import postgres_base_url

HS256_KEY = "test-hs256-key-that-is-long-enough-0123456789"
SECRET_KEY = base64.urlsafe_b64encode(b"k" * 32).decode()
ALL_SCOPES = ("schedules:read", "schedules:write")
T = TypeVar("T")


class StepClock:
    """Deterministic clock: every call returns a strictly later instant (1 ms apart) so
    created_at ordering is well defined; `advance()` jumps ahead."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


T0 = datetime(2026, 3, 2, 9, 0, 30, tzinfo=UTC)  # a Monday, mid-minute


class ManualClock:
    """Returns `now` until moved; never reads the wall clock."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> datetime:
        self.now += timedelta(**kw)
        return self.now

    def set(self, when: datetime) -> None:
        self.now = when


def token(tenant: str, scopes: tuple[str, ...] = ALL_SCOPES) -> str:
    return mint_token(HS256_KEY, tenant_id=tenant, scopes=scopes, ttl_seconds=3600)


def auth(tenant: str = "tenant-a", scopes: tuple[str, ...] = ALL_SCOPES) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(tenant, scopes)}"}


@pytest.fixture(scope="session")
def postgres_session_url() -> Iterator[str]:
    """One PostgreSQL database per test session, migrated once; each test gets it emptied
    (creating a database per test costs ~0.5 s on this machine, truncating ~10 ms). Created and
    dropped on the server named by TEST_POSTGRES_URL, like tests/support/pg.py does."""
    base = make_url(postgres_base_url())
    name = f"sched_{uuid.uuid4().hex[:12]}"
    admin = base.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )

    async def admin_sql(sql: str) -> None:
        conn = await asyncpg.connect(admin)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    _run_in_own_loop(admin_sql(f'CREATE DATABASE "{name}"'))
    url = base.set(database=name).render_as_string(hide_password=False)
    try:
        _run_in_own_loop(upgrade(url))
        yield url
    finally:
        _run_in_own_loop(admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _run_in_own_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a private loop in a helper thread: this fixture may be
    first requested from inside a running (function-scoped) test loop."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result(timeout=120)


async def _truncate_all(url: str) -> None:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        names = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            " AND tablename <> 'alembic_version'"
        )
        if names:
            tables = ", ".join(f'"{r["tablename"]}"' for r in names)
            await conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    finally:
        await conn.close()


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A migrated, empty database: a fresh SQLite file, or the session's PostgreSQL database
    truncated."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'scheduler.db'}"
        await upgrade(url)
        yield url
    else:
        url = request.getfixturevalue("postgres_session_url")
        await _truncate_all(url)
        yield url
