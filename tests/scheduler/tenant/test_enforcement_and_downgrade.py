"""Enforcement at create/update (limits from the projection) and the downgrade that pauses
schedules over a new limit, with schedule.paused events and one alert in the outbox."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.adapters.db.tables import schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.domain.policies import ScheduleState
from scheduler.domain.tenant import Entitlements
from scheduler.service_layer import quota, tenant_events
from scheduler.service_layer.errors import QuotaExceeded
from scheduler.service_layer.unit_of_work import ListFilter
from tests.scheduler.tenant.conftest import (
    T0,
    ManualClock,
    add_schedule,
    entitlements_event,
    outbox_rows,
)


def test_checks_use_the_engine_and_name_the_limit() -> None:
    ent = Entitlements(max_schedules=2, min_interval_seconds=3600, max_payload_bytes=20)
    # Every 30 minutes in hours 9-17 is a 30-minute gap although one field looks hourly.
    with pytest.raises(QuotaExceeded) as info:
        quota.check_definition(ent, cron="0,30 9-17 * * *", timezone="UTC", payload=None)
    assert (info.value.limit, info.value.current) == ("min_interval_seconds", 1800)
    # A fixed daily schedule in a DST zone: the spring-forward day is 23 h, still >= 1 h.
    quota.check_definition(ent, cron="30 2 * * *", timezone="America/New_York", payload={"a": 1})
    with pytest.raises(QuotaExceeded) as info:
        quota.check_definition(ent, cron="@daily", timezone="UTC", payload={"k": "x" * 30})
    assert info.value.limit == "max_payload_bytes"
    assert info.value.current == 38
    with pytest.raises(QuotaExceeded):
        quota.check_resume(ent, live_count=3, cron="@daily", timezone="UTC", payload=None)


async def _limits(uows: SqlUnitOfWorkFactory, tenant_id: str) -> Entitlements:
    """Exact limits from the projection, as the API's cache serves them."""
    async with uows() as uow:
        return await quota.entitlements_for(uow, tenant_id)


async def test_create_refused_with_limits_from_the_projection(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    await tenant_events.apply_events(
        uows(), [entitlements_event("t1", T0, {"max_schedules": 1})], mclock()
    )
    limits = await _limits(uows, "t1")
    await add_schedule(uows, mclock, tenant="t1", limits=limits)
    with pytest.raises(QuotaExceeded) as info:
        await add_schedule(uows, mclock, tenant="t1", limits=limits)
    assert (info.value.limit, info.value.limit_value, info.value.current) == ("max_schedules", 1, 2)
    # Another tenant keeps the defaults.
    await add_schedule(uows, mclock, tenant="t2", limits=await _limits(uows, "t2"))


async def test_downgrade_pauses_newest_over_limit_and_alerts_once(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock, engine: AsyncEngine
) -> None:
    made = [await add_schedule(uows, mclock, tenant="t1", name=f"s{i}") for i in range(5)]
    minutely = await add_schedule(uows, mclock, tenant="t1", name="fast", cron="* * * * *")
    other = await add_schedule(uows, mclock, tenant="t2", name="other")
    before = len(await outbox_rows(engine))
    mclock.advance(minutes=1)
    downgrade = entitlements_event(
        "t1", mclock(), {"max_schedules": 4, "min_interval_seconds": 120}
    )
    report = await tenant_events.apply_events(uows(), [downgrade], mclock())
    # Oldest four (s0..s3) stay within max_schedules; s4 and "fast" (6th) are beyond it.
    assert report.paused == [made[4].id, minutely.id]
    async with uows() as uow:
        states = {
            s.definition.name: (s.state, s.paused_reason)
            for s in await uow.schedules.list_page("t1", limit=10, after=None, filters=ListFilter())
        }
        assert await uow.schedules.get("t2", other.id) is not None
    assert states["s0"] == (ScheduleState.ACTIVE, None)
    assert states["s4"] == (ScheduleState.PAUSED, "quota")
    assert states["fast"] == (ScheduleState.PAUSED, "quota")
    new = (await outbox_rows(engine))[before:]
    paused_events = [r for r in new if r["type"] == "schedule.paused"]
    alerts = [json.loads(r["payload"]) for r in new if r["topic"] == "notification-requests"]
    assert {r["key"] for r in paused_events} == {made[4].id, minutely.id}
    assert len(alerts) == 1
    alert = alerts[0]["data"]
    assert alert["template"] == "schedule_quota_paused"
    assert alert["channels"] == ["email", "in_app"]
    assert alert["data"]["paused_count"] == 2
    assert [s["limit"] for s in alert["data"]["schedules"]] == ["max_schedules"] * 2
    # Redelivery of the same event: nothing paused again, no second alert.
    again = await tenant_events.apply_events(uows(), [downgrade], mclock() + timedelta(seconds=5))
    assert again.duplicates == 1
    assert len(await outbox_rows(engine)) == before + 3


async def test_min_interval_downgrade_pauses_only_too_frequent(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    slow = await add_schedule(uows, mclock, tenant="t1", name="hourly", cron="0 * * * *")
    fast = await add_schedule(uows, mclock, tenant="t1", name="5min", cron="*/5 * * * *")
    event = entitlements_event("t1", mclock(), {"min_interval_seconds": 600})
    report = await tenant_events.apply_events(uows(), [event], mclock())
    assert report.paused == [fast.id]
    async with uows() as uow:
        got = await uow.schedules.get("t1", slow.id)
        assert got is not None
        assert got.state is ScheduleState.ACTIVE


async def test_completed_schedules_do_not_rank_active_ones_out_of_max_schedules(
    uows: SqlUnitOfWorkFactory, mclock: ManualClock, engine: AsyncEngine
) -> None:
    done = await add_schedule(uows, mclock, tenant="t1", name="done")  # the oldest
    kept = [await add_schedule(uows, mclock, tenant="t1", name=f"s{i}") for i in range(2)]
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(schedules)
            .where(schedules.c.id == done.id)
            .values(state="completed", next_run_at=None)
        )
    event = entitlements_event("t1", mclock(), {"max_schedules": 2})
    report = await tenant_events.apply_events(uows(), [event], mclock())
    # Two schedules can still fire: within the limit, nothing is paused.
    assert report.paused == []
    async with uows() as uow:
        for s in kept:
            got = await uow.schedules.get("t1", s.id)
            assert got is not None
            assert got.state is ScheduleState.ACTIVE
