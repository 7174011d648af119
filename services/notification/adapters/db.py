"""Engine creation (the column types are servicekit's: `servicekit.data.columns`)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from servicekit.data.database import DatabaseBounds, create_bounded_engine


def create_engine(url: str, bounds: DatabaseBounds | None = None) -> AsyncEngine:
    """servicekit's bounded engine. On SQLite one process writes from the API, the consumers
    and the dispatcher: each connection waits for the lock instead of failing at once, and
    readers proceed during writes (WAL)."""
    return create_bounded_engine(url, bounds)
