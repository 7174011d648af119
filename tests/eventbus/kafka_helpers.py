"""Helpers for the Kafka tests: unique names and bounded polling."""

from __future__ import annotations

import asyncio
import uuid

from eventbus import KafkaConsumer, Record
from tests.support.kafka import FAST_GROUP_JOIN

# Upper bound for any wait on the broker in these tests (seconds).
WAIT_LIMIT = 15.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def fast_consumer(bootstrap: str, topics: list[str], group_id: str) -> KafkaConsumer:
    return KafkaConsumer(bootstrap, topics, group_id, **FAST_GROUP_JOIN)


async def poll_exactly(consumer: KafkaConsumer, count: int) -> list[Record]:
    """Poll until `count` records arrived (never more: later polls ask only for the rest)."""
    records: list[Record] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_LIMIT
    while len(records) < count:
        if loop.time() > deadline:
            raise AssertionError(f"only {len(records)} of {count} records within {WAIT_LIMIT} s")
        records += await consumer.poll(max_records=count - len(records), timeout_seconds=0.5)
    return records
