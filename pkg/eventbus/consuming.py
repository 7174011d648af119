"""The one batch-consumer step of both services: poll, handle, then commit.

    consuming = BatchConsumer(
        consumer, parse=lambda r: decode(r.value), handle=apply_batch, name="tenant consumer",
        max_records=200, poll_seconds=1.0,
    )
    loop = WorkerLoop("tenant consumer", consuming.step, idle_seconds=0.0, ...)

Each `step()` polls up to `max_records` records, parses each one (a record `parse` refuses with
one of `malformed` is a poison message: logged, reported to `on_malformed` and skipped, never
retried), hands the parsed items to `handle` and commits the offsets only after `handle`
returned. When `handle` raises, the step raises (the worker loop backs off) and keeps the batch:
the next step hands the SAME items to `handle` again and polls nothing until they are handled.
Polling on would move the consumer past the failed records, and the next commit would put the
group's offsets beyond records never handled. Handlers must therefore be idempotent, which they
are anyway: a crash between `handle` and the commit redelivers the batch.

A failed commit is logged and not retried: the offsets are committed with the next batch, and
a crash before that redelivers records already handled, which idempotent handlers absorb.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from eventbus.errors import ConsumeError, EnvelopeError
from eventbus.limits import check_poll_arguments
from eventbus.messages import Record
from eventbus.ports import Consumer

T = TypeVar("T")

log = logging.getLogger("eventbus.consuming")


@dataclass(frozen=True)
class _Batch(Generic[T]):
    polled: int
    """Records polled, the malformed ones included."""
    records: list[Record]
    """The well-formed ones, in log order."""
    items: list[T]
    """What `parse` made of them."""


class BatchConsumer(Generic[T]):
    def __init__(
        self,
        consumer: Consumer,
        *,
        parse: Callable[[Record], T],
        handle: Callable[[Sequence[T]], Awaitable[object]],
        name: str,
        max_records: int,
        poll_seconds: float = 1.0,
        malformed: tuple[type[Exception], ...] = (EnvelopeError,),
        on_malformed: Callable[[Record], None] | None = None,
        on_handled: Callable[[Sequence[Record]], None] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        """`poll_seconds`: how long a poll waits for the first record (the consumer's idle
        wait); `on_handled` is called with the well-formed records of each handled batch."""
        check_poll_arguments(max_records, poll_seconds)
        self.consumer = consumer
        self.parse = parse
        self.handle = handle
        self.name = name
        self.max_records = max_records
        self.poll_seconds = poll_seconds
        self.malformed = malformed
        self.on_malformed = on_malformed
        self.on_handled = on_handled
        self.log = logger or log
        self._polled: Sequence[Record] | None = None
        """The polled records not handled yet: a failure in parsing or handling retries these,
        never polls past them."""
        self._held: _Batch[T] | None = None
        """The polled batch not handled yet: handed to `handle` again before any new poll."""

    @property
    def holding(self) -> bool:
        """A polled batch waits to be handled (its offsets are not committed)."""
        return self._held is not None

    async def run_once(self, timeout_seconds: float | None = None) -> int:
        """Handle the held batch, or poll a new one (waiting up to `timeout_seconds`, by default
        `poll_seconds`) and handle it; then commit. Returns how many records the batch had, the
        malformed ones included (0: nothing was polled)."""
        if self._held is None:
            if self._polled is None:
                timeout = self.poll_seconds if timeout_seconds is None else timeout_seconds
                records = await self.consumer.poll(
                    max_records=self.max_records, timeout_seconds=timeout
                )
                if not records:
                    return 0
                self._polled = records
            self._held = self._parse(self._polled)
        batch = self._held
        if batch.items:
            await self.handle(batch.items)
        self._held = None
        self._polled = None
        if self.on_handled is not None:
            self.on_handled(batch.records)
        await self._commit()
        return batch.polled

    async def step(self) -> float | None:
        """`run_once` as a servicekit `WorkerLoop` step: after a batch go on at once; after an
        empty poll go on at once too when the poll itself waited, else wait the loop's idle
        time."""
        if await self.run_once():
            return 0.0
        return 0.0 if self.poll_seconds > 0 else None

    def _parse(self, records: Sequence[Record]) -> _Batch[T]:
        well_formed: list[Record] = []
        items: list[T] = []
        for record in records:
            try:
                item = self.parse(record)
            except self.malformed as exc:
                self.log.warning(
                    "%s: skipping malformed record %s[%d]@%d: %s",
                    self.name,
                    record.topic,
                    record.partition,
                    record.offset,
                    exc,
                )
                if self.on_malformed is not None:
                    self.on_malformed(record)
                continue
            well_formed.append(record)
            items.append(item)
        return _Batch(len(records), well_formed, items)

    async def _commit(self) -> None:
        try:
            await self.consumer.commit()
        except ConsumeError as exc:
            self.log.warning("%s: offset commit failed (%s)", self.name, exc)
