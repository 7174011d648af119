"""Pick the bus from configuration: Kafka when bootstrap servers are set, else in-process."""

from __future__ import annotations

from collections.abc import Sequence

from eventbus.in_process import InProcessBus
from eventbus.kafka import KafkaConsumer, KafkaPublisher
from eventbus.ports import Consumer, Publisher


def make_publisher(
    bootstrap_servers: str | None,
    bus: InProcessBus | None,
    *,
    idempotent: bool,
    client_id: str = "eventbus-publisher",
) -> Publisher:
    """`KAFKA_BOOTSTRAP_SERVERS` set: a Kafka publisher; unset: the process's shared bus."""
    if bootstrap_servers:
        return KafkaPublisher(bootstrap_servers, idempotent=idempotent, client_id=client_id)
    if bus is None:
        raise ValueError("without Kafka bootstrap servers an in-process bus is required")
    return bus.publisher()


def make_consumer(
    bootstrap_servers: str | None,
    bus: InProcessBus | None,
    topics: Sequence[str],
    group_id: str,
    *,
    client_id: str = "eventbus-consumer",
) -> Consumer:
    """`KAFKA_BOOTSTRAP_SERVERS` set: a Kafka group member; unset: a member on the shared bus."""
    if bootstrap_servers:
        return KafkaConsumer(bootstrap_servers, topics, group_id, client_id=client_id)
    if bus is None:
        raise ValueError("without Kafka bootstrap servers an in-process bus is required")
    return bus.consumer(topics, group_id)
