"""Async engine factory with the per-dialect settings both databases need."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def create_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    """SQLite gets ONE pooled connection: every transaction queues for it, so SQLite sees a
    single writer and never answers "database is locked" (DESIGN §10: give SQLite one writer).
    WAL lets external readers proceed; foreign keys on; busy timeout as a last resort."""
    parsed = make_url(url)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        kwargs.update(pool_size=1, max_overflow=0, pool_timeout=60)
        kwargs["connect_args"] = {"timeout": 30}
    else:
        kwargs.update(pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)
    engine = create_async_engine(url, **kwargs)
    if parsed.get_backend_name() == "sqlite":

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

    return engine
