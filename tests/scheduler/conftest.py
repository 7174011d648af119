"""Shared scheduler fixtures: a migrated, empty database per backend (SQLite file, PostgreSQL via
tests/support/pg.py), a deterministic clock, and tokens."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from authclient import mint_token
from scheduler.adapters.db.migrate import upgrade
from tests.support.pg import fresh_postgres_database, session_database, truncate_all

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
    """One PostgreSQL database per test session, migrated once; `database_url` empties it."""
    with session_database("sched", upgrade) as url:
        yield url


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
async def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A database of the test's own with no tables yet (the migration tests migrate it)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"
        return
    async with fresh_postgres_database("mig") as url:
        yield url


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
        await truncate_all(url)
        yield url
