"""The scheduler's engine: servicekit's bounded engine with the scheduler's SQLite settings."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from servicekit.data.database import DatabaseBounds, create_bounded_engine


def create_engine(
    url: str, *, pool_size: int = 10, bounds: DatabaseBounds | None = None
) -> AsyncEngine:
    """SQLite gets ONE pooled connection: every transaction queues for it, so SQLite sees a
    single writer and never answers "database is locked" (DESIGN §10: give SQLite one writer).
    WAL lets external readers proceed; synchronous=NORMAL is durable enough under WAL."""
    return create_bounded_engine(
        url,
        bounds,
        pool_size=pool_size,
        sqlite_single_connection=True,
        sqlite_pragmas=("synchronous=NORMAL",),
    )
