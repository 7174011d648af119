"""Reading the relay's output from tansu with a real aiokafka consumer group."""

from __future__ import annotations

import asyncio
import uuid

from eventbus import KafkaConsumer, KafkaPublisher, Record
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from tests.support.kafka import FAST_GROUP_JOIN

WAIT_LIMIT = 20.0  # seconds; bound on any wait for the broker


def kafka_publisher(bootstrap: str) -> KafkaPublisher:
    """The relay's publisher as configured for the test broker (it refuses idempotence), with
    short timeouts so an outage is noticed within seconds."""
    return KafkaPublisher(
        bootstrap, idempotent=False, request_timeout_ms=1_500, publish_timeout_seconds=3.0
    )


async def read_exactly(bootstrap: str, count: int) -> list[Record]:
    """`count` records of schedule-events from a new group, then a short extra poll so that a
    duplicate beyond `count` would be seen too."""
    consumer = KafkaConsumer(
        bootstrap, [SCHEDULE_EVENTS_TOPIC], f"g-{uuid.uuid4().hex[:8]}", **FAST_GROUP_JOIN
    )
    await consumer.start()
    try:
        records: list[Record] = []
        async with asyncio.timeout(WAIT_LIMIT):
            while len(records) < count:
                records += await consumer.poll(max_records=500, timeout_seconds=0.5)
        records += await consumer.poll(timeout_seconds=0.5)
        return records
    finally:
        await consumer.stop()
