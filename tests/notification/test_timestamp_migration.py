"""Migration 0005 rewrites the instants notification's own column type stored on SQLite (naive
`YYYY-MM-DD HH:MM:SS.ffffff`) to servicekit's form, so old and new rows compare as text; on
PostgreSQL (`timestamptz`) it changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from notification.adapters.db import create_engine
from notification.adapters.migrate import alembic_config, upgrade
from notification.adapters.tables import alert_requests
from tests.support.pg import fresh_postgres_database

OLD = datetime(2026, 3, 8, 15, 0, 0, 250000, tzinfo=UTC)
# Stored by notification's type before servicekit's: naive UTC through SQLAlchemy's SQLite DATETIME.
OLD_SQLITE_TEXT = "2026-03-08 15:00:00.250000"
OLD_WHOLE_SECONDS_TEXT = "2026-03-08 16:00:00"


async def test_sqlite_rows_of_the_old_type_are_rewritten_and_compare_right(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/n.db")
    try:
        await upgrade(engine, "0004")
        async with engine.begin() as conn:
            await conn.exec_driver_sql(
                "INSERT INTO alert_requests (id, tenant_id, template, created_at) VALUES"
                f" ('old', 't', 'x', '{OLD_SQLITE_TEXT}'),"
                f" ('whole', 't', 'x', '{OLD_WHOLE_SECONDS_TEXT}')"
            )
        await upgrade(engine)
        async with engine.begin() as conn:
            await conn.execute(
                alert_requests.insert(),
                {"id": "new", "tenant_id": "t", "template": "x", "created_at": OLD.replace(hour=9)},
            )
            raw = dict(
                (await conn.exec_driver_sql("SELECT id, created_at FROM alert_requests")).all()
            )
            c = alert_requests.c
            read = dict((await conn.execute(sa.select(c.id, c.created_at))).all())
            before_noon = sa.select(c.id).where(c.created_at < OLD.replace(hour=12))
            early = (await conn.execute(before_noon)).scalars().all()
            by_time = (await conn.execute(sa.select(c.id).order_by(c.created_at))).scalars().all()
    finally:
        await engine.dispose()
    assert raw == {
        "old": "2026-03-08T15:00:00.250000+00:00",
        "whole": "2026-03-08T16:00:00.000000+00:00",
        "new": "2026-03-08T09:00:00.250000+00:00",
    }
    assert read["old"] == OLD
    assert read["whole"] == datetime(2026, 3, 8, 16, tzinfo=UTC)
    assert early == ["new"]  # unrewritten, "2026-03-08 15:00…" would sort before "…T12:00"
    assert by_time == ["new", "old", "whole"]


async def test_sqlite_downgrade_restores_the_old_form(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/n.db")
    try:
        await upgrade(engine)
        async with engine.begin() as conn:
            await conn.execute(
                alert_requests.insert(),
                {"id": "r", "tenant_id": "t", "template": "x", "created_at": OLD},
            )

        def downgrade(sync_conn: sa.Connection) -> None:
            cfg = alembic_config()
            cfg.attributes["connection"] = sync_conn
            command.downgrade(cfg, "0004")

        async with engine.begin() as conn:
            await conn.run_sync(downgrade)
            raw = (await conn.exec_driver_sql("SELECT created_at FROM alert_requests")).scalar()
    finally:
        await engine.dispose()
    assert raw == OLD_SQLITE_TEXT


@pytest.mark.postgres
async def test_postgres_values_are_untouched() -> None:
    async with fresh_postgres_database("notifts") as url:
        engine = create_engine(url)
        try:
            await upgrade(engine, "0004")
            async with engine.begin() as conn:
                await conn.execute(
                    alert_requests.insert(),
                    {"id": "r", "tenant_id": "t", "template": "x", "created_at": OLD},
                )
            await upgrade(engine)
            async with engine.connect() as conn:
                value = (await conn.execute(sa.select(alert_requests.c.created_at))).scalar()
        finally:
            await engine.dispose()
    assert value == OLD
