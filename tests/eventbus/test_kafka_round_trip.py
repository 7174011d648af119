"""Publish and consume through a real Kafka-protocol broker (tansu) with aiokafka."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from eventbus import KafkaPublisher, Message, PublishError, decode, encode, envelope
from tests.support.kafka import create_topics, fast_consumer, poll_exactly, unique

pytestmark = pytest.mark.kafka


async def started_publisher(bootstrap: str) -> KafkaPublisher:
    publisher = KafkaPublisher(bootstrap, idempotent=False, request_timeout_ms=5_000)
    await publisher.start()
    return publisher


async def test_envelopes_keys_and_headers_round_trip(kafka_bootstrap: str) -> None:
    topic = unique("schedule-events")
    await create_topics(kafka_bootstrap, [topic])
    publisher = await started_publisher(kafka_bootstrap)
    event = envelope(
        id="evt_1",
        type="schedule.triggered",
        tenant_id="t1",
        time=datetime(2026, 8, 6, 3, 0, tzinfo=UTC),
        data={"report": "daily"},
        schedule_id="sch_1",
    )
    try:
        await publisher.publish(
            [Message(topic, "sch_1", encode(event), headers=(("trace", b"abc"),))]
        )
    finally:
        await publisher.stop()
    consumer = fast_consumer(kafka_bootstrap, [topic], unique("g"))
    await consumer.start()
    try:
        [record] = await poll_exactly(consumer, 1)
    finally:
        await consumer.stop()

    assert decode(record.value) == event
    assert record.key == "sch_1"
    assert record.headers == (("trace", b"abc"),)
    assert (record.topic, record.offset) == (topic, 0)


async def test_order_is_kept_per_key_across_partitions(kafka_bootstrap: str) -> None:
    # An auto-created topic has 4 partitions on tansu, so keys spread over several of them.
    topic = unique("multi")
    publisher = await started_publisher(kafka_bootstrap)
    keys = [f"sch_{k}" for k in range(6)]
    try:
        for batch in range(4):
            await publisher.publish(
                [
                    Message(topic, key, f"{key}:{batch}:{i}".encode())
                    for i in range(5)
                    for key in keys
                ]
            )
    finally:
        await publisher.stop()
    consumer = fast_consumer(kafka_bootstrap, [topic], unique("g"))
    await consumer.start()
    try:
        records = await poll_exactly(consumer, 4 * 5 * len(keys))
    finally:
        await consumer.stop()

    for key in keys:
        mine = [r for r in records if r.key == key]
        assert len({r.partition for r in mine}) == 1  # one key, one partition
        sequence = [tuple(map(int, r.value.decode().split(":")[1:])) for r in mine]
        assert sequence == sorted(sequence)
        assert len(sequence) == 20
    assert len({r.partition for r in records}) > 1


async def test_commit_resumes_after_it_and_uncommitted_records_are_redelivered(
    kafka_bootstrap: str,
) -> None:
    topic, group = unique("commits"), unique("g")
    await create_topics(kafka_bootstrap, [topic])
    publisher = await started_publisher(kafka_bootstrap)
    try:
        await publisher.publish([Message(topic, "sch_1", b"%d" % n) for n in range(6)])
    finally:
        await publisher.stop()

    first = fast_consumer(kafka_bootstrap, [topic], group)
    await first.start()
    try:
        committed = await poll_exactly(first, 2)
        await first.commit()
        uncommitted = await poll_exactly(first, 2)
    finally:
        await first.stop()  # stops without committing: models a crash after processing
    second = fast_consumer(kafka_bootstrap, [topic], group)
    await second.start()
    try:
        resumed = await poll_exactly(second, 4)
    finally:
        await second.stop()

    assert [r.offset for r in committed] == [0, 1]
    assert [r.offset for r in uncommitted] == [2, 3]
    # Resumes right after the commit: 2 and 3 again (redelivered), never 0 or 1.
    assert [r.offset for r in resumed] == [2, 3, 4, 5]
    assert [r.value for r in resumed] == [b"2", b"3", b"4", b"5"]


async def test_an_oversized_message_is_a_publish_error(kafka_bootstrap: str) -> None:
    publisher = KafkaPublisher(kafka_bootstrap, idempotent=False, max_message_bytes=1_000)
    await publisher.start()
    try:
        with pytest.raises(PublishError):
            await publisher.publish([Message(unique("big"), "k", b"x" * 2_000)])
    finally:
        await publisher.stop()
