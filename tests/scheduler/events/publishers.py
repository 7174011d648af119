"""Publisher wrappers that model failures around a real publisher (no mocks of the bus itself)."""

from __future__ import annotations

from collections.abc import Sequence

from eventbus import Message, Publisher, PublishError, Record


class _Wrapper:
    """A real publisher inside: starting and stopping are its own."""

    inner: Publisher

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()


class RelayKilled(Exception):
    """Stands for the relay process dying right after the bus acknowledged a batch."""


class CrashAfterPublish(_Wrapper):
    """Publishes for real, then "dies" before the relay can mark the rows sent."""

    def __init__(self, inner: Publisher) -> None:
        self.inner = inner

    async def publish(self, messages: Sequence[Message]) -> None:
        await self.inner.publish(messages)
        raise RelayKilled("killed between publish and mark-sent")


class FailingFirst(_Wrapper):
    """Refuses the first `failures` batches (a bus that is down), then publishes for real."""

    def __init__(self, inner: Publisher, failures: int) -> None:
        self.inner = inner
        self.remaining = failures
        self.refused = 0

    async def publish(self, messages: Sequence[Message]) -> None:
        if self.remaining > 0:
            self.remaining -= 1
            self.refused += 1
            raise PublishError("bus unavailable (test)")
        await self.inner.publish(messages)


def by_key(records: Sequence[Record]) -> dict[str | None, list[Record]]:
    """Records grouped by key, each group in consumption order."""
    groups: dict[str | None, list[Record]] = {}
    for record in records:
        groups.setdefault(record.key, []).append(record)
    return groups


class FailingOnCall(_Wrapper):
    """Publishes for real except on call number `fail_on` (1-based), which is refused."""

    def __init__(self, inner: Publisher, fail_on: int) -> None:
        self.inner = inner
        self.fail_on = fail_on
        self.calls = 0

    async def publish(self, messages: Sequence[Message]) -> None:
        self.calls += 1
        if self.calls == self.fail_on:
            raise PublishError("bus unavailable (test)")
        await self.inner.publish(messages)


class SlowBus(_Wrapper):
    """Publishes for real, each batch taking `seconds` on a manual monotonic clock (a bus that
    acknowledges slowly), without sleeping."""

    def __init__(self, inner: Publisher, seconds: float) -> None:
        self.inner = inner
        self.seconds = seconds
        self.now = 0.0
        self.batches = 0

    def monotonic(self) -> float:
        return self.now

    async def publish(self, messages: Sequence[Message]) -> None:
        await self.inner.publish(messages)
        self.now += self.seconds
        self.batches += 1
