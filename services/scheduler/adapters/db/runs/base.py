"""What every part of the SQL runs repository shares: the unit of work's connection, the secret
box, the dialect and its two portable helpers."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from scheduler.adapters.db.dialect import dialect_insert, in_values
from scheduler.adapters.secret_box import SecretBox


class RunSql:
    def __init__(self, conn: AsyncConnection, box: SecretBox) -> None:
        self.conn = conn
        self.box = box
        self.is_postgres = conn.dialect.name == "postgresql"

    def _insert(self, table: sa.Table) -> Any:
        return dialect_insert(self.conn, table)

    def _in(self, column: sa.ColumnElement[Any], values: list[Any]) -> sa.ColumnElement[bool]:
        """`column IN values` (dialect.in_values: one array parameter on PostgreSQL)."""
        return in_values(self.conn, column, values)
