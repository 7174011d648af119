"""Shared event-bus mechanism: in-process bus and Kafka producer/consumer adapters.

Imports neither service. Services build a publisher and consumers with `make_publisher` and
`make_consumer`; in the embedded default both services share one `InProcessBus`.
"""

from eventbus.consuming import BatchConsumer
from eventbus.dedup import SeenIds
from eventbus.envelope import decode, encode, envelope, format_time, parse_time
from eventbus.errors import BusError, ConsumeError, EnvelopeError, PublishError
from eventbus.factory import make_consumer, make_publisher
from eventbus.in_process import InProcessBus
from eventbus.kafka import KafkaConsumer, KafkaPublisher
from eventbus.limits import MAX_MESSAGE_BYTES
from eventbus.messages import Message, Record
from eventbus.ports import Consumer, Publisher

__all__ = [
    "MAX_MESSAGE_BYTES",
    "BatchConsumer",
    "BusError",
    "ConsumeError",
    "Consumer",
    "EnvelopeError",
    "InProcessBus",
    "KafkaConsumer",
    "KafkaPublisher",
    "Message",
    "PublishError",
    "Publisher",
    "Record",
    "SeenIds",
    "decode",
    "encode",
    "envelope",
    "format_time",
    "make_consumer",
    "make_publisher",
    "parse_time",
]
