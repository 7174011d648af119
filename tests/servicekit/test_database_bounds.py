"""servicekit's engine bounds every call: PostgreSQL sessions carry the server-side timeouts,
a statement past its bound is cancelled by the server (a transient error), migrations get a
longer statement bound, and both services read the bounds from their settings."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from notification.config import NotificationSettings
from scheduler.config import SchedulerSettings
from servicekit.data.database import DatabaseBounds, create_bounded_engine
from servicekit.runtime.transient import is_transient
from tests.support.pg import fresh_postgres_database

BOUNDS = DatabaseBounds(
    connect_timeout_seconds=2,
    command_timeout_seconds=5,
    statement_timeout_seconds=0.5,
    lock_timeout_seconds=0.25,
    idle_in_transaction_timeout_seconds=7,
    pool_timeout_seconds=1,
)


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with fresh_postgres_database("bounds") as url:
        yield url


@pytest.mark.postgres
async def test_postgres_sessions_are_bounded_and_a_slow_statement_is_cancelled(
    pg_url: str,
) -> None:
    engine = create_bounded_engine(pg_url, BOUNDS)
    try:
        async with engine.connect() as conn:
            shown = [
                (await conn.execute(sa.text(f"SHOW {name}"))).scalar_one()
                for name in (
                    "statement_timeout",
                    "lock_timeout",
                    "idle_in_transaction_session_timeout",
                )
            ]
            assert shown == ["500ms", "250ms", "7s"]
            started = time.monotonic()
            with pytest.raises(sa.exc.DBAPIError) as caught:
                await conn.execute(sa.text("SELECT pg_sleep(5)"))
            assert time.monotonic() - started < 4  # the server's 0.5 s, not the 5 s sleep
            assert is_transient(caught.value)  # 57014: a 503 at the API, a retry in a worker
    finally:
        await engine.dispose()
    migrations = create_bounded_engine(pg_url, BOUNDS.for_migrations())
    try:
        async with migrations.connect() as conn:
            assert (await conn.execute(sa.text("SHOW statement_timeout"))).scalar_one() == "30min"
    finally:
        await migrations.dispose()


def test_both_services_read_the_bounds_from_their_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCHEDULER_DB_STATEMENT_TIMEOUT_SECONDS", "3")
    monkeypatch.setenv("NOTIFICATION_DB_COMMAND_TIMEOUT_SECONDS", "4")
    assert SchedulerSettings().database_bounds().statement_timeout_seconds == 3
    assert NotificationSettings().database_bounds().command_timeout_seconds == 4
    assert SchedulerSettings().database_bounds().pool_timeout_seconds == (
        DatabaseBounds().pool_timeout_seconds
    )


def test_every_bound_and_http_limit_is_a_setting_of_both_services(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`DatabaseBounds.of` / `HttpLimits.of` read `db_<field>` / `http_<field>`: a bound added to
    either dataclass without its setting in both services fails here, not at a pod's start."""
    from dataclasses import fields

    from servicekit.http.protocol import HttpLimits

    for prefix in ("SCHEDULER", "NOTIFICATION"):
        for i, f in enumerate(fields(DatabaseBounds)):
            monkeypatch.setenv(f"{prefix}_DB_{f.name.upper()}", str(1 + i))
        for i, f in enumerate(fields(HttpLimits)):
            monkeypatch.setenv(f"{prefix}_HTTP_{f.name.upper()}", str(100 + i))
    for settings in (SchedulerSettings(), NotificationSettings()):
        bounds, limits = settings.database_bounds(), settings.http_limits()
        assert [getattr(bounds, f.name) for f in fields(bounds)] == [
            1 + i for i in range(len(fields(bounds)))
        ]
        assert [getattr(limits, f.name) for f in fields(limits)] == [
            100 + i for i in range(len(fields(limits)))
        ]


def test_a_postgres_url_on_another_driver_is_refused_with_a_clear_error() -> None:
    # The dispatchers' claim and settle run on asyncpg itself.
    with pytest.raises(ValueError, match=r"postgresql\+asyncpg://"):
        create_bounded_engine("postgresql+psycopg://u@127.0.0.1/db")
