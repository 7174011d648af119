"""servicekit's engine pings a pooled PostgreSQL connection at checkout only after it sat idle
(PING_AFTER_IDLE_SECONDS): a dead idle connection is replaced before anyone uses it, and a
connection back in the pool a moment ago goes out with no ping (SQLAlchemy's pre-ping cost
three round trips on every checkout). `asyncpg_connection` hands out the asyncpg connection
inside the unit of work's transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

from servicekit.data import database
from servicekit.data.database import asyncpg_connection, create_bounded_engine
from tests.support.pg import fresh_postgres_database

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with fresh_postgres_database("idle_ping") as url:
        yield url


async def _backend_pid(engine: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one())


async def test_a_dead_idle_connection_is_replaced_at_checkout(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "PING_AFTER_IDLE_SECONDS", 0.0)  # every return counts as idle
    engine = create_bounded_engine(pg_url, pool_size=1)
    admin = create_bounded_engine(pg_url, pool_size=1)
    try:
        first = await _backend_pid(engine)
        async with admin.connect() as other:  # the pooled connection is idle: kill its backend
            await other.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": first})
        second = await _backend_pid(engine)  # no error: the ping found it dead
        assert second != first
    finally:
        await engine.dispose()
        await admin.dispose()


async def test_a_connection_used_a_moment_ago_goes_out_without_a_ping(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "PING_AFTER_IDLE_SECONDS", 3600.0)
    engine = create_bounded_engine(pg_url, pool_size=1)
    sent: list[str] = []
    try:
        await _backend_pid(engine)
        async with engine.connect() as conn:
            raw = (await conn.get_raw_connection()).driver_connection
            raw.add_query_logger(lambda q: sent.append(q.query))
            await conn.execute(sa.text("SELECT 1"))
            await conn.rollback()
        async with engine.connect() as conn:
            await conn.execute(sa.text("SELECT 2"))
        assert ";" not in [q.strip() for q in sent]
        monkeypatch.setattr(database, "PING_AFTER_IDLE_SECONDS", 0.0)
        async with engine.connect() as conn:  # idle now: pinged first
            await conn.execute(sa.text("SELECT 3"))
        assert ";" in [q.strip() for q in sent]
    finally:
        await engine.dispose()


async def test_the_asyncpg_connection_is_inside_the_unit_of_works_transaction(
    pg_url: str,
) -> None:
    engine = create_bounded_engine(pg_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (x int)"))
        async with engine.connect() as conn:
            await conn.begin()
            db = await asyncpg_connection(conn)  # before any SQLAlchemy statement
            assert db.is_in_transaction()
            await db.execute("INSERT INTO t VALUES (1)")
            await conn.rollback()
        async with engine.connect() as conn:
            assert (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar_one() == 0
    finally:
        await engine.dispose()
