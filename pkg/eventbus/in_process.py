"""The in-process bus of the embedded default: one per process, shared by both services.

It keeps Kafka's contract where the services can observe it: one partition per topic (so a total
order, which includes the per-key order), offsets per consumer group kept in the bus, a new group
starting at the earliest retained offset, and an uncommitted batch delivered again to the next
consumer of the group after `stop` (which models a crash). It is durable only in memory: the
services' outboxes are what survive a restart, and they publish again what was not acknowledged.

Retention is bounded: a topic keeps at most `max_retained_per_topic` records, and drops records
that every group subscribed to it has committed. A topic no group subscribes to keeps at most
`max_retained_unsubscribed` (a worker-only process without Kafka publishes topics nobody in it
reads: a herd's events would otherwise sit in its memory up to the full bound). A group first
subscribed after records were dropped starts at the earliest retained offset, as a Kafka group
does after log retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from eventbus.errors import PublishError
from eventbus.limits import MAX_MESSAGE_BYTES, check_poll_arguments
from eventbus.messages import Message, Record
from eventbus.ports import Consumer, Publisher

# The in-process bus has one partition per topic.
_PARTITION = 0

# 100,000 records of ~1 KiB events is ~100 MiB: the most an embedded process should hold for a
# group that stopped consuming.
DEFAULT_MAX_RETAINED_PER_TOPIC = 100_000
# What a topic with no subscribed group keeps, for a group that subscribes later (~1 MiB).
DEFAULT_MAX_RETAINED_UNSUBSCRIBED = 1_000


@dataclass
class _TopicLog:
    base_offset: int = 0  # offset of records[0]; advances as retention drops records
    records: deque[Record] = field(default_factory=deque)

    @property
    def end_offset(self) -> int:
        return self.base_offset + len(self.records)

    def drop_before(self, offset: int) -> None:
        while self.records and self.base_offset < offset:
            self.records.popleft()
            self.base_offset += 1


@dataclass
class _Group:
    # Committed offset per topic: the offset of the next record to deliver. Absent: earliest.
    committed: dict[str, int] = field(default_factory=dict)
    # The one consumer that owns each topic's single partition, as in a Kafka group.
    owners: dict[str, int] = field(default_factory=dict)
    topics: set[str] = field(default_factory=set)


class InProcessBus:
    """Topics and consumer-group offsets held in memory, shared by every publisher and consumer."""

    def __init__(
        self,
        *,
        max_retained_per_topic: int = DEFAULT_MAX_RETAINED_PER_TOPIC,
        max_retained_unsubscribed: int = DEFAULT_MAX_RETAINED_UNSUBSCRIBED,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        if max_retained_per_topic < 1 or max_retained_unsubscribed < 1:
            raise ValueError("a topic must retain at least 1 record")
        self._max_retained = max_retained_per_topic
        self._max_unsubscribed = min(max_retained_unsubscribed, max_retained_per_topic)
        self._max_message_bytes = max_message_bytes
        self._logs: dict[str, _TopicLog] = {}
        self._groups: dict[str, _Group] = {}
        self._member_ids = itertools.count(1)
        # Replaced on every change; waiters hold the one current when they started waiting.
        self._changed = asyncio.Event()

    def publisher(self) -> Publisher:
        return InProcessPublisher(self)

    def consumer(self, topics: Sequence[str], group_id: str) -> Consumer:
        if not topics or not group_id:
            raise ValueError("a consumer needs at least one topic and a group id")
        group = self._groups.setdefault(group_id, _Group())
        # Subscribing here, not on start, keeps retention from dropping what the group has not
        # read yet.
        group.topics.update(topics)
        return InProcessConsumer(self, tuple(dict.fromkeys(topics)), group_id)

    # -- used by the publisher and consumers of this bus ------------------------------------

    def _log(self, topic: str) -> _TopicLog:
        return self._logs.setdefault(topic, _TopicLog())

    def _append(self, messages: Sequence[Message]) -> None:
        # Validate the whole batch first, so a refused batch appends nothing.
        for message in messages:
            if not message.topic:
                raise PublishError("message has an empty topic")
            if len(message.value) > self._max_message_bytes:
                raise PublishError(
                    f"message of {len(message.value)} bytes to {message.topic!r} exceeds "
                    f"the {self._max_message_bytes}-byte limit"
                )
        for message in messages:
            log = self._log(message.topic)
            log.records.append(
                Record(
                    topic=message.topic,
                    partition=_PARTITION,
                    offset=log.end_offset,
                    key=message.key,
                    value=message.value,
                    headers=message.headers,
                )
            )
        for topic in {m.topic for m in messages}:
            self._trim(topic)
        self._notify()

    def _trim(self, topic: str) -> None:
        log = self._log(topic)
        subscribed = [g for g in self._groups.values() if topic in g.topics]
        if subscribed:
            # A group that has not committed holds everything from the base offset.
            oldest_needed = min(g.committed.get(topic, log.base_offset) for g in subscribed)
            log.drop_before(oldest_needed)
            log.drop_before(log.end_offset - self._max_retained)
        else:
            log.drop_before(log.end_offset - self._max_unsubscribed)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_for_change(self, timeout_seconds: float) -> None:
        changed = self._changed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout_seconds)

    def _new_member_id(self) -> int:
        return next(self._member_ids)


class InProcessPublisher:
    """Appends to the bus; an append is acknowledged as soon as it is in the bus's memory."""

    def __init__(self, bus: InProcessBus) -> None:
        self._bus = bus
        self._started = False

    async def start(self) -> None:
        self._started = True

    async def stop(self) -> None:
        self._started = False

    async def publish(self, messages: Sequence[Message]) -> None:
        if not self._started:
            raise PublishError("publisher is not started")
        self._bus._append(messages)


class InProcessConsumer:
    """One member of a consumer group on the in-process bus."""

    def __init__(self, bus: InProcessBus, topics: tuple[str, ...], group_id: str) -> None:
        self._bus = bus
        self._topics = topics
        self._group_id = group_id
        self._member_id = bus._new_member_id()
        self._positions: dict[str, int] = {}  # next offset to return, per owned topic
        self._started = False
        self._rotation = 0  # start each poll at a different topic so none starves the others

    @property
    def _group(self) -> _Group:
        return self._bus._groups[self._group_id]

    async def start(self) -> None:
        self._started = True
        self._claim_free_topics()

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        group = self._group
        for topic in self._positions:
            if group.owners.get(topic) == self._member_id:
                del group.owners[topic]
        # Uncommitted positions are forgotten: the next member resumes at the committed offset.
        self._positions.clear()
        self._bus._notify()  # a waiting member of the group may now take over

    async def poll(self, *, max_records: int = 500, timeout_seconds: float = 1.0) -> list[Record]:
        check_poll_arguments(max_records, timeout_seconds)
        if not self._started:
            raise RuntimeError("consumer is not started")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        while True:
            self._claim_free_topics()
            records = self._take(max_records)
            remaining = deadline - loop.time()
            if records or remaining <= 0 or not self._started:
                return records
            await self._bus._wait_for_change(remaining)

    async def commit(self) -> None:
        if not self._started:
            raise RuntimeError("consumer is not started")
        group = self._group
        for topic, position in self._positions.items():
            group.committed[topic] = position
            self._bus._trim(topic)

    def _claim_free_topics(self) -> None:
        group = self._group
        for topic in self._topics:
            if topic in self._positions or topic in group.owners:
                continue
            group.owners[topic] = self._member_id
            log = self._bus._log(topic)
            self._positions[topic] = max(group.committed.get(topic, 0), log.base_offset)

    def _take(self, max_records: int) -> list[Record]:
        owned = [t for t in self._topics if t in self._positions]
        if not owned:
            return []
        self._rotation = (self._rotation + 1) % len(owned)
        records: list[Record] = []
        for topic in owned[self._rotation :] + owned[: self._rotation]:
            room = max_records - len(records)
            if room <= 0:
                break
            log = self._bus._log(topic)
            # Retention may have dropped records this member had not reached: resume at the
            # earliest retained one, as Kafka's auto_offset_reset="earliest" does.
            position = max(self._positions[topic], log.base_offset)
            start = position - log.base_offset
            taken = list(itertools.islice(log.records, start, start + room))
            records.extend(taken)
            self._positions[topic] = position + len(taken)
        return records
