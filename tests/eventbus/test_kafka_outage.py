"""A publisher facing a stopped broker fails within a bounded time, then recovers on restart.

Each test owns its broker (memory storage): a restart loses every topic and record, so only
messages published after the restart can be read back.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from eventbus import ConsumeError, KafkaPublisher, Message, PublishError
from tests.support.kafka import (
    WAIT_LIMIT,
    TansuBroker,
    create_topics,
    fast_consumer,
    poll_exactly,
    unique,
)

pytestmark = pytest.mark.kafka

# The publisher's own bound on one publish (seconds); a failure must arrive within it plus slack.
PUBLISH_TIMEOUT = 3.0


def publisher_for(broker: TansuBroker) -> KafkaPublisher:
    return KafkaPublisher(
        broker.bootstrap,
        idempotent=False,
        request_timeout_ms=1_500,
        publish_timeout_seconds=PUBLISH_TIMEOUT,
    )


async def publish_once_up(publisher: KafkaPublisher, messages: list[Message]) -> int:
    """Publish until acknowledged, as an outbox relay does; return the number of attempts."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_LIMIT
    attempts = 0
    while True:
        attempts += 1
        try:
            await publisher.publish(messages)
            return attempts
        except PublishError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)  # the relay's retry pause


async def assert_fails_in_bounded_time(publisher: KafkaPublisher, message: Message) -> float:
    began = time.monotonic()
    with pytest.raises(PublishError):
        await publisher.publish([message])
    elapsed = time.monotonic() - began
    assert elapsed < PUBLISH_TIMEOUT + 2.0
    return elapsed


async def test_publish_fails_while_the_broker_is_down_and_succeeds_after_restart(
    tansu_broker: TansuBroker,
) -> None:
    topic = unique("outage")
    await create_topics(tansu_broker.bootstrap, [topic])
    publisher = publisher_for(tansu_broker)
    await publisher.start()
    try:
        await publisher.publish([Message(topic, "k", b"before")])
        tansu_broker.stop()

        await assert_fails_in_bounded_time(publisher, Message(topic, "k", b"lost"))

        tansu_broker.start()  # same port, empty memory storage
        # tansu quirk: a producer that still has the topic in its metadata cache gets an ack
        # for a topic the restarted broker no longer has, and the record is dropped. Re-create
        # the topic, as a deployment's provisioning would.
        await create_topics(tansu_broker.bootstrap, [topic])
        await publish_once_up(publisher, [Message(topic, "k", b"after")])
    finally:
        await publisher.stop()
    consumer = fast_consumer(tansu_broker.bootstrap, [topic], unique("g"))
    await consumer.start()
    try:
        records = await poll_exactly(consumer, 1)
        extra = await consumer.poll(timeout_seconds=0.5)
    finally:
        await consumer.stop()

    # "before" died with the broker's memory; "lost" was refused, so its outbox row stays unsent.
    assert [r.value for r in records + extra] == [b"after"]


async def test_a_publisher_started_while_the_broker_is_down_connects_later(
    tansu_broker: TansuBroker,
) -> None:
    tansu_broker.stop()
    topic = unique("late-start")
    publisher = publisher_for(tansu_broker)
    await publisher.start()  # must not raise: the service starts while Kafka is down
    try:
        await assert_fails_in_bounded_time(publisher, Message(topic, "k", b"early"))

        tansu_broker.start()
        await publish_once_up(publisher, [Message(topic, "k", b"late")])
    finally:
        await publisher.stop()
    consumer = fast_consumer(tansu_broker.bootstrap, [topic], unique("g"))
    await consumer.start()
    try:
        [record] = await poll_exactly(consumer, 1)
    finally:
        await consumer.stop()

    assert record.value == b"late"


async def test_a_consumer_cannot_start_without_a_broker(tansu_broker: TansuBroker) -> None:
    tansu_broker.stop()
    consumer = fast_consumer(tansu_broker.bootstrap, [unique("t")], unique("g"))

    with pytest.raises(ConsumeError):
        await asyncio.wait_for(consumer.start(), WAIT_LIMIT)
