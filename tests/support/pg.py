"""Fresh PostgreSQL databases for tests, created on the server named by TEST_POSTGRES_URL.

Without TEST_POSTGRES_URL the tests that need it are skipped, unless REQUIRE_POSTGRES=1 (CI), which
turns the skip into a failure.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import make_url

T = TypeVar("T")


def postgres_base_url() -> str:
    url = os.environ.get("TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("REQUIRE_POSTGRES") == "1":
            pytest.fail("REQUIRE_POSTGRES=1 but TEST_POSTGRES_URL is not set")
        pytest.skip("TEST_POSTGRES_URL not set")
    return url


async def _admin(sql: str) -> None:
    base = make_url(postgres_base_url())
    dsn = base.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _new_database(prefix: str) -> tuple[str, str]:
    """A fresh database name and its SQLAlchemy URL (not created yet)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    url = make_url(postgres_base_url()).set(database=name)
    return name, url.render_as_string(hide_password=False)


@asynccontextmanager
async def fresh_postgres_database(prefix: str = "t") -> AsyncIterator[str]:
    """Create an empty database, yield its SQLAlchemy URL, drop it afterwards."""
    name, url = _new_database(prefix)
    await _admin(f'CREATE DATABASE "{name}"')
    try:
        yield url
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def session_database(
    prefix: str, migrate: Callable[[str], Coroutine[Any, Any, None]]
) -> Iterator[str]:
    """A database for a whole test session, migrated once (for session-scoped fixtures, which
    may be first requested from inside a running test loop: the admin work runs on a loop of
    its own). Creating a database costs ~0.5 s here, `truncate_all` ~10 ms."""
    name, url = _new_database(prefix)
    _run_in_own_loop(_admin(f'CREATE DATABASE "{name}"'))
    try:
        _run_in_own_loop(migrate(url))
        yield url
    finally:
        _run_in_own_loop(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def truncate_all(url: str) -> None:
    """Empty every table but the migration version, so a migrated database starts a test clean."""
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


def _run_in_own_loop(coro: Coroutine[Any, Any, T]) -> T:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result(timeout=120)


def _literal(value: object) -> str:
    """A test value as an SQL literal (EXECUTE's arguments are not bind parameters)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "NULL"}[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            # PostgreSQL would read a naive timestamp in the session's time zone.
            raise ValueError(f"naive datetime {value.isoformat()}: give it a time zone")
        return f"'{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no literal for {type(value).__name__}")


async def explain_generic(
    db: asyncpg.Connection, sql: str, *args: object, options: str = "ANALYZE, COSTS OFF"
) -> str:
    """The plan of `sql` ($n parameters, typed by casts) as PostgreSQL runs it on its generic
    plan, as it does a prepared statement after five executions if that costs no more (EXPLAIN
    of a statement with bound values shows a plan for those values instead): PREPAREd, then
    EXPLAIN EXECUTE under plan_cache_mode = force_generic_plan. In the caller's transaction,
    which must be open on `db`; plan_cache_mode stays forced for the rest of that transaction
    (the callers roll it back)."""
    name = f"generic_{uuid.uuid4().hex[:8]}"
    arguments = ", ".join(_literal(a) for a in args)
    await db.execute("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
    # Savepoints (the caller's transaction is open, so asyncpg nests them): an error in PREPARE
    # or EXPLAIN rolls back only to them, and is the one that propagates, not a DEALLOCATE
    # refused in an aborted transaction.
    async with db.transaction():
        await db.execute(f"PREPARE {name} AS {sql}")
        try:
            async with db.transaction():
                rows = await db.fetch(f"EXPLAIN ({options}) EXECUTE {name}({arguments})")
        finally:
            # Rolling back to a savepoint does not undo PREPARE: deallocate in either case.
            await db.execute(f"DEALLOCATE {name}")
    return "\n".join(r[0] for r in rows)
