"""Portable column types, identical behaviour on SQLite and PostgreSQL.

UTCDateTime: timezone-aware UTC in and out. PostgreSQL stores `timestamptz`; SQLite stores fixed-
width text `YYYY-MM-DDTHH:MM:SS.ffffff+00:00`, whose lexicographic order is chronological, so
ORDER BY and comparisons with bound parameters (which pass through the same type) are correct.
JSONText: JSON as text (no dialect-specific JSON operators are used).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from servicekit.data.json_encoding import compact_json, parse_json

_SQLITE_FORMAT = "%Y-%m-%dT%H:%M:%S.%f+00:00"


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
            return value.strftime(_SQLITE_FORMAT)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            return datetime.fromisoformat(value).astimezone(UTC)
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class JSONText(TypeDecorator[Any]):
    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        # SQL NULL only for a Python None meant as "no value" is ambiguous with JSON null; we
        # always store JSON text, so JSON null is the text "null".
        return compact_json(value).decode()

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        return parse_json(value)


def partial_index(name: str, *columns: Any, where: str, unique: bool = False) -> sa.Index:
    """An index over the rows matching `where` on both dialects (the queries that use it must
    repeat the predicate's text, which is why each predicate is a named constant)."""
    return sa.Index(
        name,
        *columns,
        unique=unique,
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )
