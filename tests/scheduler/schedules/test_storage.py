"""SQL storage on SQLite and PostgreSQL: migrations, encryption at rest, outbox written in the same
transaction as the change, rollback without commit, secret rotation grace, UTC round trip."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import current_revision, head_revision, upgrade
from scheduler.adapters.db.tables import metadata
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.definition import Target
from scheduler.domain.policies import (
    Action,
    BreakerPolicy,
    MisfirePolicy,
    OverlapPolicy,
)
from scheduler.domain.schedule import Schedule
from scheduler.service_layer.errors import VersionMismatch
from tests.scheduler.definitions import BASE, definition

NOW = datetime(2026, 3, 8, 6, 59, 59, 123456, tzinfo=UTC)
SECRET = "whsec_dGhpcyBpcyBhIHRlc3Qgc2VjcmV0IG9mIDMyIGJ5dGVzISE="


@pytest.fixture
async def uow_factory(database_url: str) -> AsyncIterator[SqlUnitOfWorkFactory]:
    await upgrade(database_url)
    engine = create_engine(database_url)
    yield SqlUnitOfWorkFactory(engine, SecretBox([b"k" * 32]))
    await engine.dispose()


def new_schedule(id_: str = "sch_1", tenant: str = "t1", at: datetime = NOW) -> Schedule:
    return Schedule.create(
        id=id_,
        tenant_id=tenant,
        definition=definition(
            name="n",
            cron="30 2 * * *",
            timezone="America/New_York",
            action=Action.WEBHOOK,
            target=Target("https://example.com/h", {"X-A": "1"}, 5),
            payload={"k": [1, 2, None]},
            retry_policy=BASE.policies.retry_policy,
            misfire_policy=MisfirePolicy.FIRE_ALL,
            overlap_policy=OverlapPolicy.SKIP,
            breaker=BreakerPolicy(3),
        ),
        next_run_at=at.astimezone(timezone(timedelta(hours=-5))),
        now=at,
    )


async def test_migrations_reach_head_and_match_tables(database_url: str) -> None:
    await upgrade(database_url)
    await upgrade(database_url)  # idempotent: a second run is a no-op
    assert await current_revision(database_url) == head_revision()
    engine = create_engine(database_url)
    async with engine.connect() as conn:
        names = await conn.run_sync(lambda c: set(sa.inspect(c).get_table_names()))
        for table in metadata.tables.values():
            cols = await conn.run_sync(
                lambda c, t=table.name: {col["name"] for col in sa.inspect(c).get_columns(t)}
            )
            assert cols == {c.name for c in table.columns}, table.name
        indexes = await conn.run_sync(
            lambda c: {i["name"] for i in sa.inspect(c).get_indexes("schedules")}
        )
    await engine.dispose()
    assert {"schedules", "idempotency_keys", "outbox"} <= names
    assert {"ix_schedules_due", "ix_schedules_tenant_order"} <= indexes


async def test_round_trip_and_secret_encrypted_at_rest(
    uow_factory: SqlUnitOfWorkFactory,
) -> None:
    s = new_schedule()
    async with uow_factory() as uow:
        await uow.schedules.add(s, SECRET)
        await uow.commit()
    async with uow_factory() as uow:
        got = await uow.schedules.get("t1", "sch_1")
        assert await uow.schedules.secrets("t1", "sch_1", NOW) == [SECRET]
        raw = (await uow.conn.execute(sa.text("SELECT * FROM schedules"))).mappings().one()
    assert got is not None
    assert got.definition == s.definition
    # Aware UTC in, aware UTC out, microseconds kept, whatever offset was given.
    assert got.next_run_at == s.next_run_at
    assert got.next_run_at.tzinfo is not None
    assert got.created_at == NOW
    dump = json.dumps({k: str(v) for k, v in raw.items()})
    assert SECRET not in dump
    assert SECRET.removeprefix("whsec_") not in dump


async def test_other_tenant_sees_nothing(uow_factory: SqlUnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.schedules.add(new_schedule(), SECRET)
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.schedules.get("t2", "sch_1") is None
        assert await uow.schedules.secrets("t2", "sch_1", NOW) == []
        assert await uow.schedules.count_live("t2") == 0


async def test_events_go_to_outbox_with_the_change(uow_factory: SqlUnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.schedules.add(new_schedule(), SECRET)
        await uow.commit()
    async with uow_factory() as uow:
        s = await uow.schedules.get("t1", "sch_1")
        assert s is not None
        s.pause("maintenance", NOW + timedelta(minutes=1))
        await uow.schedules.save(s)
        await uow.commit()
    async with uow_factory() as uow:
        rows = (
            await uow.conn.execute(
                sa.text("SELECT type, key, topic, payload FROM outbox ORDER BY id")
            )
        ).all()
    assert [r[0] for r in rows] == ["schedule.created", "schedule.paused"]
    assert {r[1] for r in rows} == {"sch_1"}
    assert {r[2] for r in rows} == {"schedule-events"}
    envelope = json.loads(rows[1][3])
    assert envelope["tenant_id"] == "t1"
    assert envelope["schedule_id"] == "sch_1"
    assert envelope["data"]["paused_reason"] == "maintenance"
    assert envelope["time"].endswith("Z")  # RFC 3339 UTC, the one timestamp style
    assert envelope["id"].startswith("evt_")


async def test_no_commit_means_no_change_and_no_event(uow_factory: SqlUnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.schedules.add(new_schedule(), SECRET)
        # leaving without commit() rolls back
    async with uow_factory() as uow:
        assert await uow.schedules.get("t1", "sch_1") is None
        n = (await uow.conn.execute(sa.text("SELECT count(*) FROM outbox"))).scalar_one()
    assert n == 0


async def test_stale_save_is_refused(uow_factory: SqlUnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.schedules.add(new_schedule(), SECRET)
        await uow.commit()
    async with uow_factory() as uow:
        s = await uow.schedules.get("t1", "sch_1")
        assert s is not None
        # Another writer bumps the version after we read (SQLite has one connection, so the
        # "other writer" is simulated in the same transaction; PostgreSQL races are API-tested).
        await uow.conn.execute(sa.text("UPDATE schedules SET version = version + 1"))
        s.pause("late", NOW)
        with pytest.raises(VersionMismatch):
            await uow.schedules.save(s)


async def test_rotation_keeps_previous_secret_for_grace(uow_factory: SqlUnitOfWorkFactory) -> None:
    async with uow_factory() as uow:
        await uow.schedules.add(new_schedule(), SECRET)
        await uow.commit()
    async with uow_factory() as uow:
        await uow.schedules.set_secret(
            "t1", "sch_1", "whsec_new", keep_previous_until=NOW + timedelta(hours=24)
        )
        await uow.commit()
    async with uow_factory() as uow:
        assert await uow.schedules.secrets("t1", "sch_1", NOW) == ["whsec_new", SECRET]
        later = NOW + timedelta(hours=24, seconds=1)
        assert await uow.schedules.secrets("t1", "sch_1", later) == ["whsec_new"]


async def test_list_orders_by_created_then_id(uow_factory: SqlUnitOfWorkFactory) -> None:
    from scheduler.service_layer.unit_of_work import ListFilter

    async with uow_factory() as uow:
        # Same created_at: ties broken by id; an earlier instant in another offset sorts first.
        await uow.schedules.add(new_schedule("sch_b"), SECRET)
        await uow.schedules.add(new_schedule("sch_a"), SECRET)
        earlier = (NOW - timedelta(microseconds=1)).astimezone(timezone(timedelta(hours=9)))
        await uow.schedules.add(new_schedule("sch_z", at=earlier), SECRET)
        await uow.commit()
    async with uow_factory() as uow:
        page = await uow.schedules.list_page("t1", limit=10, after=None, filters=ListFilter())
        assert [s.id for s in page] == ["sch_z", "sch_a", "sch_b"]
        rest = await uow.schedules.list_page(
            "t1", limit=10, after=(NOW, "sch_a"), filters=ListFilter()
        )
        assert [s.id for s in rest] == ["sch_b"]
