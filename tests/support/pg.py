"""Fresh PostgreSQL databases for tests, created on the server named by TEST_POSTGRES_URL.

Without TEST_POSTGRES_URL the tests that need it are skipped, unless REQUIRE_POSTGRES=1 (CI), which
turns the skip into a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest
from sqlalchemy.engine import make_url


def postgres_base_url() -> str:
    url = os.environ.get("TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("REQUIRE_POSTGRES") == "1":
            pytest.fail("REQUIRE_POSTGRES=1 but TEST_POSTGRES_URL is not set")
        pytest.skip("TEST_POSTGRES_URL not set")
    return url


@asynccontextmanager
async def fresh_postgres_database(prefix: str = "t") -> AsyncIterator[str]:
    """Create an empty database, yield its SQLAlchemy URL, drop it afterwards."""
    base = make_url(postgres_base_url())
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin_dsn = base.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        conn = await asyncpg.connect(admin_dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()
