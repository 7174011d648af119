"""Run the Alembic migrations shipped inside this package, programmatically (no alembic.ini), so
`scheduler migrate`, dev start and tests work from any working directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from scheduler.adapters.db.engine import create_engine
from servicekit.data.database import DatabaseBounds

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


async def upgrade(
    url: str, revision: str = "head", *, bounds: DatabaseBounds | None = None
) -> None:
    """Migrations keep the connect, lock and checkout bounds but may run long statements."""
    await _migrate(url, command.upgrade, revision, bounds)


async def downgrade(url: str, revision: str, *, bounds: DatabaseBounds | None = None) -> None:
    """Back to `revision` (a rollback of a release; the downgrade tests), bounded as `upgrade`."""
    await _migrate(url, command.downgrade, revision, bounds)


async def _migrate(
    url: str,
    step: Callable[[Config, str], None],
    revision: str,
    bounds: DatabaseBounds | None,
) -> None:
    engine = create_engine(url, bounds=(bounds or DatabaseBounds()).for_migrations())

    def run(connection: Connection) -> None:
        cfg = alembic_config()
        cfg.attributes["connection"] = connection
        step(cfg, revision)

    try:
        async with engine.begin() as conn:
            await conn.run_sync(run)
    finally:
        await engine.dispose()


async def current_revision(url: str, *, bounds: DatabaseBounds | None = None) -> str | None:
    engine = create_engine(url, bounds=bounds)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda c: MigrationContext.configure(c).get_current_revision()
            )
    finally:
        await engine.dispose()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()
