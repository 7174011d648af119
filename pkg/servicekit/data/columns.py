"""The datetime column type of both services' tables: aware UTC in and out, on both dialects.

PostgreSQL stores `timestamptz`. SQLite has no datetime type: values are stored as fixed-width
text `YYYY-MM-DDTHH:MM:SS.ffffff+00:00`, whose lexicographic order is chronological, so ORDER BY
and comparisons with bound parameters (which pass through this type too) are correct. A naive
datetime is refused on write, never guessed.

Reads also take naive text (`YYYY-MM-DD HH:MM:SS.ffffff`) as UTC: that is how notification's
SQLite files stored instants before its migration 0005 rewrote them to the form above, and one
such value must read as the instant it was, whatever the process's local zone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

SQLITE_FORMAT = "%Y-%m-%dT%H:%M:%S.%f+00:00"


class UTCDateTime(TypeDecorator[datetime]):
    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.String(32))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise ValueError("UTCDateTime needs an aware datetime")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.strftime(SQLITE_FORMAT)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        if value.tzinfo is UTC:  # what both dialects hand back for our own writes
            return value
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
