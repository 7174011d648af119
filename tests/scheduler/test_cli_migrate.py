"""`scheduler migrate` as a real process runs within the SCHEDULER_DB_* bounds: with another
session holding a lock the migration needs, it gives up after SCHEDULER_DB_LOCK_TIMEOUT_SECONDS
(here 0.5 s) instead of the 10 s default, and says so in one line."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from scheduler.adapters.db.migrate import upgrade
from tests.support.pg import fresh_postgres_database

SCHEDULER = str(Path(sys.executable).parent / "scheduler")
pytestmark = pytest.mark.postgres


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def test_migrate_gives_up_after_the_configured_lock_timeout(tmp_path: Path) -> None:
    async with fresh_postgres_database("migrate_bounds") as url:
        await upgrade(url)
        holder = await asyncpg.connect(_dsn(url))
        try:
            tx = holder.transaction()
            await tx.start()
            await holder.execute("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE")
            env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULER_")}
            env |= {"SCHEDULER_DATABASE_URL": url, "SCHEDULER_DB_LOCK_TIMEOUT_SECONDS": "0.5"}
            started = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                SCHEDULER,
                "migrate",
                cwd=tmp_path,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            elapsed = time.monotonic() - started
            await tx.rollback()
        finally:
            await holder.close()
    assert proc.returncode == 1
    message = err.decode()
    assert message.count("\n") == 1, message  # one line, no traceback
    assert "lock timeout" in message, message
    # The default bound (10 s) would have held it at least that long; process start-up on a
    # loaded machine takes a few seconds, so the margin is generous.
    assert elapsed < 9, elapsed
