"""Alembic environment: uses the connection handed in by scheduler.adapters.db.migrate, or builds
an async engine from sqlalchemy.url (for the plain `alembic` command) with the migration bounds:
the default connect, lock and checkout bounds, but statements may run long."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from scheduler.adapters.db.tables import metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    from scheduler.adapters.db.engine import create_engine
    from servicekit.data.database import DatabaseBounds

    engine = create_engine(url, bounds=DatabaseBounds().for_migrations())
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    asyncio.run(_run_async(config.get_main_option("sqlalchemy.url") or ""))
