"""Migration 0014 on a database with schedules (SQLite and PostgreSQL): every existing schedule,
deleted ones too, gets one version for its current version number (`system`, `api`, no changes)
whose definition reads back equal to the schedule's; runs gain a null `schedule_version`; the
downgrade drops both and a second upgrade writes the versions again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import current_revision, downgrade, head_revision, upgrade
from scheduler.adapters.db.repository import schedule_to_row
from scheduler.adapters.db.tables import schedule_versions, schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.domain.definition import Target
from scheduler.domain.policies import Action, ScheduleState
from scheduler.domain.schedule import Schedule
from tests.scheduler.definitions import definition

AT = datetime(2026, 5, 1, 8, 30, 15, 250_000, tzinfo=UTC)


def _schedules() -> list[Schedule]:
    webhook = definition(
        name="hook",
        action=Action.WEBHOOK,
        target=Target(url="https://example.com/h", headers={"X-A": "b"}, timeout_seconds=7),
        payload={"k": [1, 2]},
        labels={"team": "ops"},
        start_at=AT - timedelta(days=3),
        end_at=AT + timedelta(days=300),
        max_runs=40,
        jitter_seconds=30,
        description="a hook",
    )
    one_shot = definition(name="once", cron=None, run_at=AT + timedelta(days=1))
    out = []
    for i, (d, state) in enumerate(
        [(webhook, ScheduleState.ACTIVE), (one_shot, ScheduleState.PAUSED), (webhook, None)]
    ):
        s = Schedule.create(id=f"sch_{i}", tenant_id="t1", definition=d, next_run_at=None, now=AT)
        s.version = 3 + i
        s.updated_at = AT + timedelta(minutes=i)
        if state is ScheduleState.PAUSED:
            s.state, s.paused_reason = state, "by hand"
        if state is None:
            s.deleted_at = AT
        out.append(s)
    return out


async def _version_rows(url: str) -> list[sa.Row]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            q = sa.select(schedule_versions).order_by(schedule_versions.c.schedule_id)
            return list(await conn.execute(q))
    finally:
        await engine.dispose()


async def test_existing_schedules_get_their_current_version(empty_url: str) -> None:
    await upgrade(empty_url, "0013")
    existing = _schedules()
    engine = create_engine(empty_url)
    try:
        async with engine.begin() as conn:
            # Only the columns 0013 has (later migrations add more).
            have = await conn.run_sync(lambda c: sa.inspect(c).get_columns("schedules"))
            names = {c["name"] for c in have}
            rows = [
                {
                    k: v
                    for k, v in {**schedule_to_row(s), "secret_ciphertext": "x"}.items()
                    if k in names
                }
                for s in existing
            ]
            await conn.execute(sa.insert(schedules), rows)
        await upgrade(empty_url)
        assert await current_revision(empty_url) == head_revision()
        got = await _version_rows(empty_url)
        assert [(r.schedule_id, r.version) for r in got] == [
            ("sch_0", 3),
            ("sch_1", 4),
            ("sch_2", 5),
        ]
        assert [(r.state, r.paused_reason) for r in got] == [
            ("active", None),
            ("paused", "by hand"),
            ("deleted", None),
        ]
        for r, s in zip(got, existing, strict=True):
            assert (r.actor, r.source, r.changes, r.superseded_at) == ("system", "api", [], None)
            assert (r.tenant_id, r.at) == ("t1", s.updated_at)
        # Each reads back as its schedule's definition, through the adapter the API reads with.
        uows = SqlUnitOfWorkFactory(engine, SecretBox([b"k" * 32]))
        async with uows() as uow:
            for s in existing:
                stored = await uow.versions.get("t1", s.id, s.version)
                assert stored is not None
                assert stored.definition == s.definition
        async with engine.connect() as conn:
            columns = await conn.run_sync(lambda c: sa.inspect(c).get_columns("runs"))
        assert "schedule_version" in {c["name"] for c in columns}
    finally:
        await engine.dispose()

    await downgrade(empty_url, "0013")
    engine = create_engine(empty_url)
    try:
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda c: sa.inspect(c).get_table_names())
            columns = await conn.run_sync(lambda c: sa.inspect(c).get_columns("runs"))
    finally:
        await engine.dispose()
    assert "schedule_versions" not in tables
    assert "schedule_version" not in {c["name"] for c in columns}
    await upgrade(empty_url)
    assert len(await _version_rows(empty_url)) == 3
