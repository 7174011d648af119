"""`action=event` attempts: `schedule.triggered` published with the run's stable id and the
DESIGN §9 envelope; success only on acknowledgement; a bus failure is a retryable attempt."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone

import pytest

from eventbus import InProcessBus, Message, PublishError, Record, decode
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from scheduler.domain.run import Run
from scheduler.service_layer.event_action import (
    PublishingEventAction,
    event_data,
    perform_event_action,
    triggered_event_id,
)
from servicekit.data.ids import is_id, new_id, stable_id
from tests.support.kafka import TansuBroker, create_topics, read_exactly, tansu_publisher
from webhookdeliver import MAX_ERROR_MESSAGE_CHARS

NOW = datetime(2026, 3, 8, 7, 0, 0, 250_000, tzinfo=UTC)
# Scheduled in a non-UTC zone: the envelope must still carry UTC with an explicit offset.
SCHEDULED_FOR = datetime(2026, 3, 8, 2, 0, tzinfo=timezone(timedelta(hours=-5)))


class Ticks:
    """A monotonic clock that advances 40 ms per reading (durations without sleeping)."""

    def __init__(self) -> None:
        self.value = 100.0

    def __call__(self) -> float:
        self.value += 0.04
        return self.value


class Refusing:
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def publish(self, messages: Sequence[Message]) -> None:
        raise PublishError("not acknowledged (test)")


class Hanging:
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def publish(self, messages: Sequence[Message]) -> None:
        await asyncio.Event().wait()  # a bus that never answers


async def attempt(publisher, run_id: str, payload: object = None, **kw):  # type: ignore[no-untyped-def]
    return await perform_event_action(
        publisher,
        run_id=run_id,
        tenant_id="tenant-a",
        schedule_id="sch_01J9ZK3T1V6Q7W8X9Y0Z1A2B3C",
        scheduled_for=SCHEDULED_FOR,
        payload=payload,
        now=NOW,
        **kw,
    )


async def read_bus(bus: InProcessBus, count: int) -> list[Record]:
    consumer = bus.consumer([SCHEDULE_EVENTS_TOPIC], "reader")
    await consumer.start()
    try:
        records = await consumer.poll(max_records=100, timeout_seconds=1.0)
        assert len(records) == count
        return records
    finally:
        await consumer.stop()


async def test_acknowledged_event_succeeds_with_the_envelope_and_a_stable_id() -> None:
    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    run_id = new_id("run", at=NOW)

    first = await attempt(publisher, run_id, {"report": "daily"}, monotonic=Ticks())
    retry = await attempt(publisher, run_id, {"report": "daily"})

    assert first.ok
    assert retry.ok
    assert first.error_kind is None
    assert first.started_at == NOW
    assert first.duration_ms == 40  # one 40 ms tick between start and end
    records = await read_bus(bus, 2)
    events = [decode(r.value) for r in records]
    assert events[0] == events[1]  # a retried attempt publishes the very same event
    assert events[0] == {
        "id": triggered_event_id(run_id),
        "type": "schedule.triggered",
        "tenant_id": "tenant-a",
        "time": "2026-03-08T07:00:00.250000Z",
        "schedule_id": "sch_01J9ZK3T1V6Q7W8X9Y0Z1A2B3C",
        "run_id": run_id,
        "scheduled_for": "2026-03-08T07:00:00Z",
        "data": {"report": "daily"},
    }
    assert [r.key for r in records] == ["sch_01J9ZK3T1V6Q7W8X9Y0Z1A2B3C"] * 2


def test_event_ids_are_stable_per_run_and_distinct_from_its_other_events() -> None:
    a, b = new_id("run"), new_id("run")
    assert triggered_event_id(a) == triggered_event_id(a)
    assert triggered_event_id(a) != triggered_event_id(b)
    assert is_id(triggered_event_id(a), "evt")
    # The run's outcome events derive their ids from (run id, type) too: never the same id.
    assert triggered_event_id(a) != stable_id("evt", a, "schedule.run.succeeded")
    with pytest.raises(ValueError, match="not a run id"):
        triggered_event_id("sch_01J9ZK3T1V6Q7W8X9Y0Z1A2B3C")


@pytest.mark.parametrize(
    ("payload", "data"),
    [
        ({"a": [1, None]}, {"a": [1, None]}),
        (None, {}),
        ([1, 2], {"payload": [1, 2]}),
        ("text", {"payload": "text"}),
        (0, {"payload": 0}),
    ],
)
def test_data_is_always_a_json_object(payload: object, data: dict[str, object]) -> None:
    assert event_data(payload) == data


async def test_unacknowledged_publish_is_a_retryable_broker_failure() -> None:
    outcome = await attempt(Refusing(), new_id("run"), {"x": 1})
    assert not outcome.ok
    assert outcome.error_kind == "broker"
    assert outcome.retryable
    assert "not acknowledged" in (outcome.error_message or "")


class RefusingAtLength:
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def publish(self, messages: Sequence[Message]) -> None:
        raise PublishError("broker says: " + "x" * 2000)


async def test_a_long_bus_error_is_stored_within_webhookdelivers_bound() -> None:
    outcome = await attempt(RefusingAtLength(), new_id("run"))
    assert outcome.error_message is not None
    assert len(outcome.error_message) == MAX_ERROR_MESSAGE_CHARS
    assert outcome.error_message.startswith("broker says: x")


async def test_a_bus_that_never_answers_is_a_retryable_timeout() -> None:
    outcome = await attempt(Hanging(), new_id("run"), timeout_seconds=0.05)
    assert (outcome.ok, outcome.error_kind, outcome.retryable) == (False, "timeout", True)


async def test_an_event_over_the_bus_limit_fails_without_retry_and_publishes_nothing() -> None:
    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    outcome = await attempt(publisher, new_id("run"), {"blob": "x" * (1024 * 1024)})
    assert (outcome.ok, outcome.error_kind, outcome.retryable) == (False, "event_invalid", False)
    await read_bus(bus, 0)


@pytest.mark.kafka
async def test_kafka_acknowledges_then_a_stopped_broker_fails_the_attempt(
    tansu_broker: TansuBroker,
) -> None:
    await create_topics(tansu_broker.bootstrap, [SCHEDULE_EVENTS_TOPIC])
    publisher = tansu_publisher(tansu_broker.bootstrap)
    await publisher.start()
    run_id = new_id("run")
    try:
        outcome = await attempt(publisher, run_id, {"k": "v"})
        assert outcome.ok
        [record] = await read_exactly(tansu_broker.bootstrap, SCHEDULE_EVENTS_TOPIC, 1)
        event = decode(record.value)
        assert (event["id"], event["run_id"], event["data"]) == (
            triggered_event_id(run_id),
            run_id,
            {"k": "v"},
        )
        assert record.key == event["schedule_id"]

        tansu_broker.stop()
        down = await attempt(publisher, new_id("run"), {"k": "v"})
        assert (down.ok, down.error_kind, down.retryable) == (False, "broker", True)
        assert down.duration_ms < 10_000  # bounded by the publisher's own timeout
    finally:
        await publisher.stop()


async def test_the_dispatchers_performer_reports_the_acknowledged_publish() -> None:
    bus = InProcessBus()
    publisher = bus.publisher()
    await publisher.start()
    run = Run.planned(
        tenant_id="tenant-a",
        schedule_id="sch_01J9ZK3T1V6Q7W8X9Y0Z1A2B3C",
        scheduled_for=SCHEDULED_FOR,
        now=NOW,
        payload={"report": "daily"},
    )
    spec = None  # the event action reads nothing of the schedule beyond the run
    action = PublishingEventAction(publisher, clock=lambda: NOW)

    result = await action.perform(run, spec, 1)  # type: ignore[arg-type]

    assert result.outcome.ok
    assert result.events == ()  # published directly: nothing for the outbox
    [record] = await read_bus(bus, 1)
    event = decode(record.value)
    assert (event["id"], event["run_id"], event["data"]) == (
        triggered_event_id(run.id),
        run.id,
        {"report": "daily"},
    )
    failed = await PublishingEventAction(Refusing(), clock=lambda: NOW).perform(run, spec, 2)  # type: ignore[arg-type]
    assert (failed.outcome.ok, failed.outcome.error_kind, failed.outcome.retryable) == (
        False,
        "broker",
        True,
    )
