"""A migration that changes a table under a cached prepared statement (a rolling deploy) is an
outage to retry, not a bug, on real PostgreSQL: whether asyncpg raises it bare or SQLAlchemy wraps
it, `is_transient` says so (a settle batch is kept, not dropped), the API answers 503, not 500,
and the retry succeeds because the driver dropped the stale statement."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from servicekit.data.database import DatabaseBounds, create_bounded_engine
from servicekit.http.unavailable import install_unavailable_handlers
from servicekit.runtime.transient import is_transient
from tests.support.pg import fresh_postgres_database

pytestmark = pytest.mark.postgres

SELECT = "SELECT a FROM t"
MIGRATION = "ALTER TABLE t ALTER COLUMN a TYPE bigint"


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with fresh_postgres_database("schema_change") as url:
        engine = create_bounded_engine(url, DatabaseBounds())
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (a integer)"))
            await conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        await engine.dispose()
        yield url


async def _migrate(url: str) -> None:
    conn = await asyncpg.connect(_dsn(url))
    try:
        await conn.execute(MIGRATION)
    finally:
        await conn.close()


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _one_connection_engine(url: str) -> AsyncEngine:
    # One pooled connection, used in turn: the statement cached before the migration is the one
    # reused after it.
    return create_bounded_engine(url, DatabaseBounds(), pool_size=1)


async def test_through_sqlalchemy_it_is_transient_and_the_retry_succeeds(database: str) -> None:
    engine = _one_connection_engine(database)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(sa.text(SELECT))).scalar_one() == 1
        await _migrate(database)
        with pytest.raises(sa.exc.DBAPIError) as raised:
            async with engine.connect() as conn:
                await conn.execute(sa.text(SELECT))
        assert type(raised.value.orig).__name__ == "InvalidCachedStatementError"
        assert is_transient(raised.value)
        async with engine.connect() as conn:  # the retry prepares the statement anew
            assert (await conn.execute(sa.text(SELECT))).scalar_one() == 1
    finally:
        await engine.dispose()


async def test_a_bare_asyncpg_prepared_statement_is_transient_too(database: str) -> None:
    conn = await asyncpg.connect(_dsn(database))
    try:
        statement = await conn.prepare(SELECT)
        assert await statement.fetchval() == 1
        await _migrate(database)
        with pytest.raises(asyncpg.exceptions.InvalidCachedStatementError) as raised:
            await statement.fetchval()
        assert is_transient(raised.value)
    finally:
        await conn.close()


async def test_the_api_answers_503_during_the_change_then_200(database: str) -> None:
    engine = _one_connection_engine(database)
    app = FastAPI()
    install_unavailable_handlers(app)

    @app.get("/a")
    async def read() -> int:
        async with engine.connect() as conn:
            return int((await conn.execute(sa.text(SELECT))).scalar_one())

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            assert (await client.get("/a")).status_code == 200
            await _migrate(database)
            during = await client.get("/a")
            assert during.status_code == 503, during.text
            assert during.json()["detail"] == "the database is unavailable; retry later"
            after = await client.get("/a")
            assert (after.status_code, after.json()) == (200, 1)
    finally:
        await engine.dispose()
