"""Migration 0010 sets PostgreSQL's fillfactor of runs to 70 (pages written from then on keep
30% free for the claim's and the settle's row versions; existing pages keep their layout), and
its downgrade restores the default; on SQLite both directions are no-ops that move the
revision."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import current_revision, downgrade, upgrade
from tests.support.pg import fresh_postgres_database

OPTIONS = "SELECT reloptions FROM pg_class WHERE relname = 'runs'"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"
        return
    async with fresh_postgres_database("m10") as pg_url:
        yield pg_url


async def _options(url: str) -> list[str] | None:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(sa.text(OPTIONS))).scalar_one()  # type: ignore[no-any-return]
    finally:
        await engine.dispose()


async def test_runs_pages_keep_room_for_updates_and_the_downgrade_restores_the_default(
    url: str,
) -> None:
    await upgrade(url)
    if url.startswith("postgresql"):
        assert await _options(url) == ["fillfactor=70"]
    await downgrade(url, "0009")
    assert await current_revision(url) == "0009"
    if url.startswith("postgresql"):
        assert await _options(url) is None
    await upgrade(url)
    assert await current_revision(url) == "0010"
