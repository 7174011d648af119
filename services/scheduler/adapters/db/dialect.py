"""The two portable helpers every SQL repository of the scheduler uses on PostgreSQL and SQLite."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection


def dialect_insert(conn: AsyncConnection, table: sa.Table) -> Any:
    """INSERT with `on_conflict_do_nothing()` available on both dialects."""
    is_postgres = conn.dialect.name == "postgresql"
    return (pg_dialect.insert if is_postgres else sqlite_dialect.insert)(table)


def rowcount(result: Any) -> int:
    """Rows a DML statement matched (0 when the driver reports none)."""
    return max(int(result.rowcount or 0), 0)
