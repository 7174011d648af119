"""Alembic environment: runs on the connection handed over by `notification.adapters.migrate`
(which opens it on the async engine), or on its own engine when run by the alembic CLI, with the
migration bounds (the default connect, lock and checkout bounds; statements may run long)."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from notification.adapters.db import create_engine
from notification.adapters.tables import metadata
from servicekit.data.database import DatabaseBounds

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_own_engine(url: str) -> None:
    engine = create_engine(url, DatabaseBounds().for_migrations())
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    asyncio.run(_run_own_engine(config.get_main_option("sqlalchemy.url") or ""))
