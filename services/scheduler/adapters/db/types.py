"""Portable column types, identical behaviour on SQLite and PostgreSQL.

UTCDateTime: servicekit's (`servicekit.data.columns`), the one of both services; its name stays
importable here for the migrations and statements that name it.
JSONText: JSON as text (no dialect-specific JSON operators are used).
LabelsJSON: a schedule's labels, jsonb on PostgreSQL (GIN-indexed: `@>` and `?` filters) and JSON
text on SQLite (json_extract / json_type filters).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from servicekit.data.columns import UTCDateTime
from servicekit.data.json_encoding import compact_json, parse_json

__all__ = ["JSONText", "LabelsJSON", "UTCDateTime", "partial_index"]


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


# none_as_null=False is irrelevant: labels are never None (an empty object at least).
LabelsJSON = sa.JSON().with_variant(JSONB(), "postgresql")


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
