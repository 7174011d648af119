"""Flow control of the fan-out deliveries (DESIGN.md §7b "Flow control", issue 30 item 5), on
SQLite and PostgreSQL with real loopback receivers: a tenant's deliveries to a destination obey
the policy it set through the scheduler (its events reach notification's copy) and the holds a
429/503 with Retry-After asks for; a held delivery is not an attempt; another destination is
not delayed; `max_in_flight` holds across two dispatchers (replicas) on one database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from aiohttp import web
from prometheus_client import CollectorRegistry

from eventbus.envelope import decode, encode, envelope
from notification.adapters.tables import destinations
from notification.service_layer.dispatch import DeliveryDispatcher, FlowControl
from notification.service_layer.flow_control import DeliveryFlowGate
from servicekit.data.ids import new_id
from tests.notification.api import deliveries, subscribe
from tests.notification.conftest import Harness
from tests.notification.dispatch import deliver_due
from tests.notification.events import publish, schedule_event
from tests.support.pg import fresh_postgres_database
from webhookdeliver import endpoint_key

TOPIC = "destination-events"


@dataclass
class FlowReceiver:
    """A real aiohttp server on 127.0.0.1: answers `answers` in turn (status, headers), then
    200, each after `delay` seconds; records every request's X-Webhook-Id and the most requests
    it had under way at once."""

    url: str = ""
    answers: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    delay: float = 0.0
    requests: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    @property
    def destination(self) -> str:
        return endpoint_key(self.url)

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.requests.append(request.headers["X-Webhook-Id"])
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            status, headers = self.answers.pop(0) if self.answers else (200, {})
            return web.Response(status=status, headers=headers, text="ok")
        finally:
            self.in_flight -= 1


@pytest.fixture
async def receivers() -> AsyncIterator[Callable[[], Awaitable[FlowReceiver]]]:
    runners: list[web.AppRunner] = []

    async def start() -> FlowReceiver:
        rx = FlowReceiver()
        app = web.Application()
        app.router.add_post("/hook", rx.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        rx.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
        return rx

    yield start
    for runner in runners:
        await runner.cleanup()


def destination_envelope(tenant: str, type_: str, at: datetime, **data: Any) -> bytes:
    return encode(envelope(id=new_id("evt"), type=type_, tenant_id=tenant, time=at, data=data))


async def set_policy(
    h: Harness, destination: str, max_in_flight: int, per_second: float | None = None
) -> None:
    """As the scheduler's PUT /v1/destinations publishes it, consumed by notification."""
    raw = destination_envelope(
        "t1",
        "destination.updated",
        datetime.now(UTC),
        destination=destination,
        max_in_flight=max_in_flight,
        per_second=per_second,
    )
    await publish(h.bus, TOPIC, raw)
    assert await h.app.destinations.run_once() == 1


async def fan_out(h: Harness, n: int) -> None:
    await publish(
        h.bus,
        "schedule-events",
        *(schedule_event("t1", "schedule.run.failed")[1] for _ in range(n)),
    )
    assert await h.app.events.run_once() == n


async def destination_rows(h: Harness) -> dict[str, dict[str, Any]]:
    async with h.app.container.engine.connect() as conn:
        rows = (await conn.execute(sa.select(destinations))).mappings().all()
    return {r["destination"]: dict(r) for r in rows}


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def test_a_429_with_retry_after_holds_the_destination_with_no_attempt_counted(
    harness: Harness, receivers: Callable[[], Awaitable[FlowReceiver]]
) -> None:
    h = harness
    rx = await receivers()
    sub = await subscribe(h, rx.url)
    await set_policy(h, rx.destination, 1)
    await fan_out(h, 3)
    rx.answers = [(429, {"Retry-After": "30"})]
    dispatcher = h.app.container.dispatcher

    assert await deliver_due(dispatcher) == 1  # max_in_flight 1: the others wait for the slot
    assert len(rx.requests) == 1
    answered_at = h.clock()
    hold_end = answered_at + timedelta(seconds=30)
    assert (await destination_rows(h))[rx.destination]["held_until"] == hold_end
    # Told to the scheduler, so its runs there wait too (tests/scheduler/runs/
    # test_notification_holds.py reads this event as the scheduler does).
    probe = h.bus.consumer([TOPIC], "probe")
    await probe.start()
    told = [decode(r.value) for r in await probe.poll(timeout_seconds=0.1)]
    await probe.stop()
    assert [(e["type"], e.get("origin"), e["tenant_id"], e["data"]) for e in told] == [
        (
            "destination.held",
            "notification",
            "t1",
            {"destination": rx.destination, "held_until": hold_end.isoformat()},
        )
    ]

    for _ in range(29):  # the whole hold: nothing reaches the receiver
        h.clock.advance(seconds=1)
        assert await deliver_due(dispatcher) == 0
    assert len(rx.requests) == 1
    rows = {r["id"]: r for r in await deliveries(h, sub["id"])}
    first = rows.pop(rx.requests[0])
    assert (first["status"], first["attempt_count"]) == ("retrying", 1)
    # Held, not failed: no attempt counted, due at the hold's end.
    assert [(r["status"], r["attempt_count"], r["attempts"]) for r in rows.values()] == [
        ("pending", 0, []),
        ("pending", 0, []),
    ]
    assert {r["next_attempt_at"] for r in rows.values()} == {iso(hold_end)}

    for _ in range(30):  # after the hold, one at a time
        h.clock.advance(seconds=1)
        await deliver_due(dispatcher)
    assert len(rx.requests) == 4
    done = await deliveries(h, sub["id"])
    assert all(r["status"] == "succeeded" for r in done)
    assert sorted(r["attempt_count"] for r in done) == [1, 1, 2]


async def test_another_destination_is_not_delayed(
    harness: Harness, receivers: Callable[[], Awaitable[FlowReceiver]]
) -> None:
    h = harness
    held, other = await receivers(), await receivers()
    held_sub = await subscribe(h, held.url)
    await subscribe(h, other.url)
    held.answers = [(503, {"Retry-After": "60"})]
    await fan_out(h, 1)
    assert await deliver_due(h.app.container.dispatcher) == 2
    assert (len(held.requests), len(other.requests)) == (1, 1)

    await fan_out(h, 2)
    h.clock.advance(seconds=1)
    assert await deliver_due(h.app.container.dispatcher) == 2  # the other destination's two
    assert (len(held.requests), len(other.requests)) == (1, 3)
    waiting = [r for r in await deliveries(h, held_sub["id"]) if r["attempt_count"] == 0]
    assert len(waiting) == 2
    assert all(r["status"] == "pending" for r in waiting)
    # Another tenant's deliveries to the same host:port are not held either.
    rows = await destination_rows(h)
    assert set(rows) == {held.destination}
    assert rows[held.destination]["tenant_id"] == "t1"


async def test_policy_events_apply_in_time_order_and_holds_only_lengthen(
    harness: Harness,
) -> None:
    h = harness
    t0 = datetime.now(UTC).replace(microsecond=0)
    dest = "api.example.com:443"
    newer = destination_envelope("t1", "destination.updated", t0, destination=dest, max_in_flight=3)
    older = destination_envelope(
        "t1",
        "destination.updated",
        t0 - timedelta(seconds=5),
        destination=dest,
        max_in_flight=7,
        per_second=2.0,
    )
    await publish(h.bus, TOPIC, newer, older)
    assert await h.app.destinations.run_once() == 2
    row = (await destination_rows(h))[dest]
    assert (row["configured"], row["max_in_flight"], row["per_second"]) == (True, 3, None)

    now = h.clock()
    long_hold = destination_envelope(
        "t1", "destination.held", now, destination=dest, held_until=iso(now + timedelta(minutes=5))
    )
    short_hold = destination_envelope(
        "t1", "destination.held", now, destination=dest, held_until=iso(now + timedelta(minutes=1))
    )
    bad = destination_envelope("t1", "destination.updated", now, destination=dest, max_in_flight=0)
    await publish(h.bus, TOPIC, long_hold, short_hold, bad)
    assert await h.app.destinations.run_once() == 3  # the malformed one is skipped
    row = (await destination_rows(h))[dest]
    assert row["held_until"] == now + timedelta(minutes=5)
    assert row["max_in_flight"] == 3

    gone = destination_envelope(
        "t1", "destination.deleted", t0 + timedelta(seconds=1), destination=dest
    )
    await publish(h.bus, TOPIC, gone)
    assert await h.app.destinations.run_once() == 1
    row = (await destination_rows(h))[dest]
    assert (row["configured"], row["max_in_flight"]) == (False, None)


async def test_a_policy_and_a_hold_set_through_the_scheduler_reach_notification(
    harness: Harness, receivers: Callable[[], Awaitable[FlowReceiver]], tmp_path: Path
) -> None:
    from scheduler.adapters.db.migrate import upgrade
    from scheduler.adapters.events import OutboxRelay, RelayConfig
    from scheduler.entrypoints.api.app import app_from_container
    from scheduler.service_layer.flow_control import Answer, FlowGate
    from tests.scheduler.conftest import StepClock, auth
    from tests.scheduler.schedules.conftest import make_container

    h = harness
    rx = await receivers()
    sub = await subscribe(h, rx.url)
    url = f"sqlite+aiosqlite:///{tmp_path}/scheduler.db"
    await upgrade(url)
    scheduler = make_container(url, StepClock(datetime.now(UTC)))
    publisher = h.bus.publisher()
    await publisher.start()
    relay = OutboxRelay(
        scheduler.engine,
        publisher,
        clock=scheduler.clock,
        config=RelayConfig(),
        registry=CollectorRegistry(),
    )
    api = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app_from_container(scheduler)), base_url="http://s"
    )
    try:
        path = f"/v1/destinations/{rx.destination}"
        r = await api.put(path, json={"max_in_flight": 1}, headers=auth("t1"))
        assert r.status_code == 201, r.text
        assert await relay.drain() == 1
        assert await h.app.destinations.run_once() == 1
        await fan_out(h, 3)
        assert await deliver_due(h.app.container.dispatcher) == 1  # the tenant's limit: 1

        # A hold the scheduler's deliveries met holds notification's too.
        held_at = h.clock()
        await FlowGate(lambda spec: None).react(
            scheduler.uow_factory, [Answer(("t1", rx.destination), held_at, 503, 120.0)], held_at
        )
        assert await relay.drain() == 1
        assert await h.app.destinations.run_once() == 1
        row = (await destination_rows(h))[rx.destination]
        assert row["held_until"] == held_at + timedelta(seconds=120)
        h.clock.advance(seconds=1)
        assert await deliver_due(h.app.container.dispatcher) == 0
        assert len(rx.requests) == 1

        # Deleted: the defaults (10 in flight) apply again once the hold is over.
        assert (await api.delete(path, headers=auth("t1"))).status_code == 204
        assert await relay.drain() == 1
        assert await h.app.destinations.run_once() == 1
        h.clock.advance(seconds=121)
        assert await deliver_due(h.app.container.dispatcher) == 2
        assert len(rx.requests) == 3
        assert all(r["attempt_count"] == 1 for r in await deliveries(h, sub["id"]))
    finally:
        await api.aclose()
        await publisher.stop()
        await scheduler.aclose()


def replica(h: Harness) -> DeliveryDispatcher:
    """Another dispatcher on the same database, as another replica runs it (its own gate)."""
    d = h.app.container.dispatcher
    assert d.flow is not None
    return DeliveryDispatcher(
        d.store,
        d.client,
        d.subscriptions,
        d.backoff,
        d.health_policy,
        lambda: datetime.now(UTC),
        on_endpoint_disabled=d.on_endpoint_disabled,
        settings=replace(d.settings, idle_poll_seconds=0.02),
        flow=FlowControl(DeliveryFlowGate(d.flow.gate.default_policy), d.flow.store),
    )


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with fresh_postgres_database("notif_flow") as url:
        yield url


@pytest.mark.postgres
async def test_max_in_flight_holds_across_two_dispatchers(
    pg_url: str,
    make_harness: Callable[..., Awaitable[Harness]],
    receivers: Callable[[], Awaitable[FlowReceiver]],
) -> None:
    h = await make_harness(pg_url)
    rx = await receivers()
    rx.delay = 0.03
    sub = await subscribe(h, rx.url)
    await set_policy(h, rx.destination, 1)
    n = 30
    await fan_out(h, n)
    first, second = replica(h), replica(h)
    running = [asyncio.create_task(d.pipeline.run()) for d in (first, second)]
    try:
        async with asyncio.timeout(60):
            while len(rx.requests) < n:
                await asyncio.sleep(0.05)
    finally:
        for d in (first, second):
            await d.pipeline.stop(grace_seconds=10)
        await asyncio.gather(*running)
    assert rx.max_in_flight == 1
    assert len(rx.requests) == len(set(rx.requests)) == n
    rows = await deliveries(h, sub["id"])
    assert len(rows) == n
    # Deferred for the slot many times, attempted once each.
    assert all((r["status"], r["attempt_count"]) == ("succeeded", 1) for r in rows)
    assert first.flow is not None
    assert second.flow is not None
    assert first.flow.gate.deferred + second.flow.gate.deferred > 0


async def test_a_take_over_is_judged_even_while_the_destination_is_held(
    make_harness: Callable[..., Awaitable[Harness]],
    db_url: str,
    receivers: Callable[[], Awaitable[FlowReceiver]],
) -> None:
    h = await make_harness(db_url, retry_max_attempts=1)
    rx = await receivers()
    sub = await subscribe(h, rx.url)
    await fan_out(h, 1)
    now = h.clock()
    lease = timedelta(seconds=h.settings.dispatch_lease_seconds)
    store = h.app.container.dispatcher.store
    assert len(await store.acquire_due_deliveries("crashed-owner", now, now + lease, 10)) == 1
    h.clock.advance(seconds=h.settings.dispatch_lease_seconds + 1)
    until = h.clock() + timedelta(minutes=10)
    raw = destination_envelope(
        "t1", "destination.held", h.clock(), destination=rx.destination, held_until=iso(until)
    )
    await publish(h.bus, TOPIC, raw)
    assert await h.app.destinations.run_once() == 1

    # Its lost attempt was its only one: dead at the take-over, not handed back to be tried
    # again after the hold (which would be an attempt beyond its budget).
    assert await deliver_due(h.app.container.dispatcher) == 1
    [row] = await deliveries(h, sub["id"])
    assert (row["status"], row["attempt_count"]) == ("dead", 1)
    assert rx.requests == []


async def test_per_second_paces_the_deliveries(
    harness: Harness, receivers: Callable[[], Awaitable[FlowReceiver]]
) -> None:
    h = harness
    rx = await receivers()
    sub = await subscribe(h, rx.url)
    await set_policy(h, rx.destination, 10, per_second=2.0)
    await fan_out(h, 6)
    dispatcher = h.app.container.dispatcher
    sent: list[int] = []
    for _ in range(5):  # 2 s: a burst of 2 tokens, then 2 a second
        sent.append(await deliver_due(dispatcher))
        h.clock.advance(seconds=0.5)
    assert sum(sent) == 6
    assert sent[0] == 2
    assert max(sent[1:]) == 1
    rows = await deliveries(h, sub["id"])
    assert all((r["status"], r["attempt_count"]) == ("succeeded", 1) for r in rows)


async def test_a_broker_that_does_not_answer_delays_a_hold_announcement_boundedly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from notification.adapters import hold_events

    class Hanging:
        async def publish(self, messages: Any) -> None:
            await asyncio.Event().wait()

    monkeypatch.setattr(hold_events, "PUBLISH_TIMEOUT_SECONDS", 0.05)
    events = hold_events.HoldEvents(Hanging(), TOPIC)  # type: ignore[arg-type]
    now = datetime.now(UTC)
    with pytest.raises(TimeoutError):  # the dispatcher logs it and goes on
        await events.held(("t1", "example.com:443"), now + timedelta(seconds=5), now)
