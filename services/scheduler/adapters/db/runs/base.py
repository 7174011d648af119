"""What every part of the SQL runs repository shares: the unit of work's connection, the secret
box, the dialect and its two portable helpers."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from scheduler.adapters.db.dialect import dialect_insert
from scheduler.adapters.secret_box import SecretBox


class RunSql:
    def __init__(self, conn: AsyncConnection, box: SecretBox) -> None:
        self.conn = conn
        self.box = box
        self.is_postgres = conn.dialect.name == "postgresql"

    def _insert(self, table: sa.Table) -> Any:
        return dialect_insert(self.conn, table)

    def _in(self, column: sa.ColumnElement[Any], values: list[Any]) -> sa.ColumnElement[bool]:
        """`column IN values`. PostgreSQL: `column = ANY(:array)`, ONE parameter, so the SQL is
        the same whatever the list's length and asyncpg prepares it once; an expanding IN
        renders a new statement per length, which costs a prepare round trip (and a plan) on
        most hot-path calls, their batch sizes varying."""
        if not self.is_postgres:
            return column.in_(values)
        array = sa.bindparam(None, values, type_=pg_dialect.ARRAY(column.type))
        return column == sa.any_(array)
