"""The two ports every bus implementation provides (in-process and Kafka)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from eventbus.messages import Message, Record


class Publisher(Protocol):
    """Publishes batches of messages.

    `publish` returns only when every message of the batch is acknowledged by the bus (Kafka:
    acks=all) and raises `PublishError` otherwise, within a bounded time. Messages with the same
    key are appended in the order given.
    """

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def publish(self, messages: Sequence[Message]) -> None: ...


class Consumer(Protocol):
    """Reads topics as a member of a consumer group.

    A group with no committed offset starts at the earliest retained offset. Records returned by
    `poll` but not committed are delivered again to the next consumer of the group (at-least-once).
    """

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def poll(self, *, max_records: int = 500, timeout_seconds: float = 1.0) -> list[Record]:
        """Return up to `max_records` records, waiting at most `timeout_seconds` for the first."""
        ...

    async def commit(self) -> None:
        """Commit the offsets of every record returned by `poll` so far."""
        ...
