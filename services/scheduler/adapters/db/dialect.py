"""The portable helpers every SQL repository of the scheduler uses on PostgreSQL and SQLite."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from servicekit.data.database import INDEX_PATHS_SQL


def dialect_insert(conn: AsyncConnection, table: sa.Table) -> Any:
    """INSERT with `on_conflict_do_nothing()` available on both dialects."""
    is_postgres = conn.dialect.name == "postgresql"
    return (pg_dialect.insert if is_postgres else sqlite_dialect.insert)(table)


def rowcount(result: Any) -> int:
    """Rows a DML statement matched (0 when the driver reports none)."""
    return max(int(result.rowcount or 0), 0)


def in_values(
    conn: AsyncConnection, column: sa.ColumnElement[Any], values: list[Any]
) -> sa.ColumnElement[bool]:
    """`column IN values`. PostgreSQL: `column = ANY(:array)`, ONE parameter, so the SQL is the
    same whatever the list's length and asyncpg prepares it once; an expanding IN renders a new
    statement per length, which costs a prepare round trip (and a plan) on most calls, their
    batch sizes varying, and a plan of a thousand parameters each time."""
    if conn.dialect.name != "postgresql":
        return column.in_(values)
    array = sa.bindparam(None, values, type_=pg_dialect.ARRAY(column.type))
    return column == sa.any_(array)


async def index_paths(conn: AsyncConnection) -> None:
    """PostgreSQL: index paths only until the transaction ends (`INDEX_PATHS_SQL` says why);
    SQLite plans by its indexes whatever the statistics."""
    if conn.dialect.name == "postgresql":
        await conn.exec_driver_sql(INDEX_PATHS_SQL)
