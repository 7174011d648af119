"""Migration 0010 sets PostgreSQL's fillfactor of runs to 70 (pages written from then on keep
30% free for the claim's and the settle's row versions; existing pages keep their layout), and
its downgrade restores the default; on SQLite both directions are no-ops that move the
revision."""

from __future__ import annotations

import sqlalchemy as sa

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import current_revision, downgrade, head_revision, upgrade

OPTIONS = "SELECT reloptions FROM pg_class WHERE relname = 'runs'"


async def _options(url: str) -> list[str] | None:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(sa.text(OPTIONS))).scalar_one()  # type: ignore[no-any-return]
    finally:
        await engine.dispose()


async def test_runs_pages_keep_room_for_updates_and_the_downgrade_restores_the_default(
    empty_url: str,
) -> None:
    await upgrade(empty_url)
    if empty_url.startswith("postgresql"):
        assert await _options(empty_url) == ["fillfactor=70"]
    await downgrade(empty_url, "0009")
    assert await current_revision(empty_url) == "0009"
    if empty_url.startswith("postgresql"):
        assert await _options(empty_url) is None
    await upgrade(empty_url)
    assert await current_revision(empty_url) == head_revision()
