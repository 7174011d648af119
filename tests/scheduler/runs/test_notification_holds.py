"""A hold that notification's deliveries met holds the scheduler's runs to the same tenant and
destination too (DESIGN.md §7b, issue 30): notification publishes `destination.held` with
`"origin": "notification"` (its adapters/hold_events.py, used here as it runs) on
`destination-events`; the scheduler's tenant-state consumer reads it, holds the destination
(never shortening a hold) and moves its due runs to the hold's end, with no attempt counted.
The scheduler's own destination events on that topic are skipped unrecorded."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import sqlalchemy as sa

from eventbus import InProcessBus, Message, encode, envelope
from notification.adapters.hold_events import HoldEvents
from scheduler.adapters.db.tables import runs
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.events.tenant_consumer import GROUP_ID, TOPICS, TenantConsumerWorker
from scheduler.bootstrap import Container
from scheduler.service_layer.planning_service import plan_due
from scheduler.service_layer.tenant_events import apply_events
from servicekit.data.ids import new_id
from tests.scheduler.conftest import auth
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import PLAN

TENANT = "tenant-a"
TOPIC = "destination-events"


async def processed(container: Container) -> int:
    async with container.engine.connect() as conn:
        return int((await conn.scalar(sa.text("SELECT count(*) FROM processed_events"))) or 0)


async def test_notifications_hold_holds_the_schedulers_runs(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock, client: httpx.AsyncClient
) -> None:
    url = "http://hooks.example.com:8443/in"
    other_url = "http://other.example.com/in"
    same = [await add_schedule(container, url, name=f"s{i}") for i in range(3)]
    await add_schedule(container, other_url, name="other")
    assert same[0].next_run_at is not None
    mclock.set(same[0].next_run_at)
    await plan_due(uows, now=mclock(), settings=PLAN)

    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    consumer = TenantConsumerWorker(
        bus.consumer(TOPICS, GROUP_ID), uows, mclock, defaults=container.tenants.defaults
    )
    await consumer.consumer.start()
    try:
        # What the scheduler publishes for notification is not for itself.
        own = envelope(
            id=new_id("evt"),
            type="destination.held",
            tenant_id=TENANT,
            time=mclock(),
            data={
                "destination": "hooks.example.com:8443",
                "held_until": (mclock() + timedelta(seconds=600)).isoformat(),
            },
        )
        await publisher.publish([Message(TOPIC, "k", encode(own))])
        before = await processed(container)
        await consumer.consuming.step()
        assert await processed(container) == before

        until = mclock() + timedelta(seconds=90)
        await HoldEvents(publisher, TOPIC).held((TENANT, "hooks.example.com:8443"), until, mclock())
        # A shorter hold told later changes nothing: a hold only lengthens.
        shorter = mclock() + timedelta(seconds=30)
        await HoldEvents(publisher, TOPIC).held(
            (TENANT, "hooks.example.com:8443"), shorter, mclock()
        )
        await consumer.consuming.step()
        assert await processed(container) == before + 2

        r = await client.get("/v1/destinations/hooks.example.com:8443", headers=auth(TENANT))
        assert r.status_code == 200, r.text
        assert r.json()["held_until"] is not None
        async with container.engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.select(
                        runs.c.schedule_id,
                        runs.c.status,
                        runs.c.attempt_count,
                        runs.c.next_attempt_at,
                    )
                )
            ).all()
        by_schedule = {r.schedule_id: r for r in rows}
        for s in same:
            row = by_schedule[s.id]
            assert (row.status, row.attempt_count) == ("pending", 0)
            assert row.next_attempt_at == until  # moved to the hold's end, not failed
        other = [r for sid, r in by_schedule.items() if sid not in {s.id for s in same}]
        assert [r.next_attempt_at for r in other] == [mclock()]  # another destination: due now
        # Another tenant's runs to the same destination are not held.
        r = await client.get("/v1/destinations/hooks.example.com:8443", headers=auth("tenant-b"))
        assert r.json()["held_until"] is None
    finally:
        await consumer.consumer.stop()
        await publisher.stop()


async def test_a_malformed_hold_is_recorded_as_invalid_and_stalls_nothing(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock, client: httpx.AsyncClient
) -> None:
    now = mclock()

    def hold(**overrides: Any) -> dict[str, Any]:
        env = envelope(
            id=new_id("evt"),
            type="destination.held",
            tenant_id=TENANT,
            time=now,
            data={
                "destination": "hooks.example.com:8443",
                "held_until": (now + timedelta(seconds=60)).isoformat(),
            },
            origin="notification",
        )
        return {**env, **overrides}

    bad = [
        hold(data={"destination": "hooks.example.com:8443", "held_until": "2026-03-02T09:00"}),
        hold(data={"destination": "hooks.example.com:8443", "held_until": 12}),
        hold(data={"destination": "<script>:1", "held_until": now.isoformat()}),
        hold(
            data={
                "destination": "hooks.example.com:8443",
                "held_until": (now + timedelta(hours=2)).isoformat(),
            }
        ),
        hold(data="not an object"),
        hold(tenant_id=""),
    ]
    good = hold()
    report = await apply_events(uows(), [*bad, good], now)
    assert (report.invalid, report.applied) == (len(bad), 1)
    assert await processed(container) == len(bad) + 1  # recorded: none comes back
    r = await client.get("/v1/destinations/hooks.example.com:8443", headers=auth(TENANT))
    assert r.json()["held_until"] is not None
