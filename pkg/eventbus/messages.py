"""The two value types that cross the bus: a message to publish and a record consumed."""

from __future__ import annotations

from dataclasses import dataclass

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Message:
    """One message to publish. `key` picks the partition, so messages with one key keep order."""

    topic: str
    key: str | None
    value: bytes
    headers: Headers = ()


@dataclass(frozen=True)
class Record:
    """One consumed message with its position in the log."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes
    headers: Headers = ()
