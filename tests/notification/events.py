"""Helpers to publish §9 envelopes onto the in-process bus, as the scheduler would."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from eventbus import InProcessBus, Message
from eventbus.envelope import encode, envelope
from servicekit.data.ids import new_id


def schedule_event(tenant: str, type_: str, **data: Any) -> tuple[str, bytes]:
    event_id = new_id("evt")
    env = envelope(
        id=event_id,
        type=type_,
        tenant_id=tenant,
        time=datetime.now(UTC),
        data=data,
        schedule_id="sch_1",
    )
    return event_id, encode(env)


async def publish(bus: InProcessBus, topic: str, *values: bytes) -> None:
    publisher = bus.publisher()
    await publisher.start()
    await publisher.publish([Message(topic=topic, key="sch_1", value=v) for v in values])
    await publisher.stop()
