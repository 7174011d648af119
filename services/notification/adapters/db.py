"""Engine creation and the column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.types import TypeDecorator

from servicekit.data.database import DatabaseBounds, create_bounded_engine


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out. SQLite drops offsets, so values are stored as naive UTC
    there and re-tagged on read; PostgreSQL stores `timestamptz`."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime refused; pass an aware UTC instant")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def create_engine(url: str, bounds: DatabaseBounds | None = None) -> AsyncEngine:
    """servicekit's bounded engine. On SQLite one process writes from the API, the consumers
    and the dispatcher: each connection waits for the lock instead of failing at once, and
    readers proceed during writes (WAL)."""
    return create_bounded_engine(url, bounds)
