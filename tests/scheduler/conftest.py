"""Shared scheduler fixtures: a database per backend (SQLite file, PostgreSQL via
tests/support/pg.py), a deterministic clock, and tokens."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

try:  # the real occurrence engine; a stand-in only until it lands (see standin_occurrences.py)
    import scheduler.domain.occurrences  # noqa: F401
except ImportError:
    from tests.scheduler import standin_occurrences

    standin_occurrences.install()

from authclient import mint_token
from tests.support.pg import fresh_postgres_database

HS256_KEY = "test-hs256-key-that-is-long-enough-0123456789"
SECRET_KEY = base64.urlsafe_b64encode(b"k" * 32).decode()
ALL_SCOPES = ("schedules:read", "schedules:write")


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


def token(tenant: str, scopes: tuple[str, ...] = ALL_SCOPES) -> str:
    return mint_token(HS256_KEY, tenant_id=tenant, scopes=scopes, ttl_seconds=3600)


def auth(tenant: str = "tenant-a", scopes: tuple[str, ...] = ALL_SCOPES) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(tenant, scopes)}"}


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'scheduler.db'}"
    else:
        async with fresh_postgres_database("sched") as url:
            yield url
