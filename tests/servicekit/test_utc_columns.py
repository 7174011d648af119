"""servicekit's UTCDateTime, the one datetime column type of both services, reads what each
service's own type stored before it, on SQLite and on PostgreSQL, whatever the local zone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.types import TypeDecorator, TypeEngine

from servicekit.data.columns import UTCDateTime
from tests.support.pg import fresh_postgres_database

INSTANTS = [
    datetime(2026, 3, 8, 7, 0, 0, 123456, tzinfo=UTC),
    datetime(2026, 3, 8, 7, 0, tzinfo=UTC),  # no microseconds
    datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
]


class SchedulerTypeBefore(TypeDecorator[datetime]):
    """services/scheduler/adapters/db/types.py's UTCDateTime before the merge (its write side)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.String(32))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
        return value


class NotificationTypeBefore(TypeDecorator[datetime]):
    """services/notification/adapters/db.py's UTCDateTime before the merge (its write side):
    naive UTC through SQLAlchemy's SQLite DATETIME."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value


@pytest.fixture
def local_zone_not_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A naive value taken as local time would be hours off here."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def tables(old: type[TypeDecorator[datetime]]) -> tuple[sa.Table, sa.Table]:
    """The same table as the old type wrote it and as the new type reads it."""

    def table(column_type: TypeEngine[datetime]) -> sa.Table:
        id_column = sa.Column("id", sa.Integer, primary_key=True)
        return sa.Table("t", sa.MetaData(), id_column, sa.Column("at", column_type))

    return table(old()), table(UTCDateTime())


async def read_back_what_was_written(url: str, old: type[TypeDecorator[datetime]]) -> list[Any]:
    written, read = tables(old)
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(written.metadata.create_all)
            await conn.execute(
                written.insert(), [{"id": i, "at": at} for i, at in enumerate(INSTANTS)]
            )
        async with engine.connect() as conn:
            return list((await conn.execute(sa.select(read.c.at).order_by(read.c.id))).scalars())
    finally:
        await engine.dispose()


@pytest.mark.parametrize("old", [SchedulerTypeBefore, NotificationTypeBefore])
@pytest.mark.usefixtures("local_zone_not_utc")
async def test_sqlite_reads_what_each_old_type_stored(
    old: type[TypeDecorator[datetime]], tmp_path: Path
) -> None:
    values = await read_back_what_was_written(f"sqlite+aiosqlite:///{tmp_path}/t.db", old)
    assert values == INSTANTS
    assert all(v.tzinfo is UTC for v in values)


@pytest.mark.postgres
@pytest.mark.parametrize("old", [SchedulerTypeBefore, NotificationTypeBefore])
@pytest.mark.usefixtures("local_zone_not_utc")
async def test_postgres_reads_what_each_old_type_stored(old: type[TypeDecorator[datetime]]) -> None:
    async with fresh_postgres_database("utccol") as url:
        values = await read_back_what_was_written(url, old)
    assert values == INSTANTS
    assert all(v.tzinfo is UTC for v in values)


async def test_sqlite_stores_fixed_width_text_that_sorts_chronologically(tmp_path: Path) -> None:
    _, table = tables(SchedulerTypeBefore)
    plus_two = timezone(timedelta(hours=2))
    written = [
        datetime(2026, 3, 8, 9, 0, 0, 5, tzinfo=plus_two),  # 07:00:00.000005Z
        datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
        datetime(2026, 3, 8, 6, 59, 59, 999999, tzinfo=UTC),
    ]
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/t.db")
    try:
        async with engine.begin() as conn:
            await conn.run_sync(table.metadata.create_all)
            await conn.execute(
                table.insert(), [{"id": i, "at": at} for i, at in enumerate(written)]
            )
            raw = (await conn.exec_driver_sql("SELECT at FROM t ORDER BY at")).scalars().all()
            ordered = (await conn.execute(sa.select(table.c.at).order_by(table.c.at))).scalars()
            assert list(ordered) == sorted(written)
            due = sa.select(table.c.id).where(table.c.at <= datetime(2026, 3, 8, 7, tzinfo=UTC))
            assert sorted((await conn.execute(due)).scalars()) == [1, 2]
    finally:
        await engine.dispose()
    assert raw == [
        "2026-03-08T06:59:59.999999+00:00",
        "2026-03-08T07:00:00.000000+00:00",
        "2026-03-08T07:00:00.000005+00:00",
    ]


@pytest.mark.parametrize("bad", [datetime(2026, 3, 8, 7, 0), "2026-03-08T07:00:00Z"])
async def test_naive_or_not_a_datetime_is_refused(bad: object, tmp_path: Path) -> None:
    _, table = tables(SchedulerTypeBefore)
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/t.db")
    try:
        async with engine.begin() as conn:
            await conn.run_sync(table.metadata.create_all)
            with pytest.raises(sa.exc.StatementError, match="needs an aware datetime"):
                await conn.execute(table.insert(), {"id": 1, "at": bad})
    finally:
        await engine.dispose()
