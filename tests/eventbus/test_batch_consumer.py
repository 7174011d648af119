"""`BatchConsumer` over the in-process bus: offsets are committed only after the handler
returned, a failed batch is handed over again (the same items, nothing polled past it), and a
record that does not parse is skipped and reported once."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from eventbus import BatchConsumer, EnvelopeError, InProcessBus, Message, Record

TOPIC = "events"
GROUP = "g"


def parse(record: Record) -> int:
    try:
        return int(json.loads(record.value))
    except ValueError as exc:
        raise EnvelopeError(str(exc)) from exc


class Handler:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[list[int]] = []

    async def __call__(self, items: Sequence[int]) -> None:
        self.calls.append(list(items))
        if self.failures:
            self.failures -= 1
            raise ConnectionRefusedError("database unreachable")


async def published(values: Sequence[bytes]) -> InProcessBus:
    bus = InProcessBus()
    bus.consumer([TOPIC], GROUP)  # subscribe first, so nothing is trimmed
    publisher = bus.publisher()
    await publisher.start()
    await publisher.publish([Message(TOPIC, None, v) for v in values])
    return bus


async def committed_rest(bus: InProcessBus) -> list[bytes]:
    """What a new member of the group is given: everything after the committed offset."""
    member = bus.consumer([TOPIC], GROUP)
    await member.start()
    try:
        return [r.value for r in await member.poll(timeout_seconds=0)]
    finally:
        await member.stop()


async def test_a_failed_batch_is_retried_before_anything_new_is_polled() -> None:
    bus = await published([b"1", b"2", b"3", b"4", b"5"])
    consumer = bus.consumer([TOPIC], GROUP)
    await consumer.start()
    handler = Handler(failures=2)
    step = BatchConsumer(
        consumer, parse=parse, handle=handler, name="test", max_records=2, poll_seconds=0
    )
    for _ in range(2):
        with pytest.raises(ConnectionRefusedError):
            await step.run_once()
        assert step.holding
    assert handler.calls == [[1, 2], [1, 2]]
    assert await step.run_once() == 2
    assert not step.holding
    assert await step.run_once() == 2
    assert await step.run_once() == 1
    assert await step.run_once() == 0
    assert handler.calls == [[1, 2], [1, 2], [1, 2], [3, 4], [5]]
    await consumer.stop()
    assert await committed_rest(bus) == []


async def test_offsets_stay_uncommitted_while_a_batch_fails() -> None:
    bus = await published([b"1", b"2", b"3"])
    consumer = bus.consumer([TOPIC], GROUP)
    await consumer.start()
    step = BatchConsumer(
        consumer, parse=parse, handle=Handler(failures=1), name="test", max_records=2
    )
    with pytest.raises(ConnectionRefusedError):
        await step.run_once(timeout_seconds=0)
    await consumer.stop()  # a crash with the batch unhandled: the group gets it again
    assert await committed_rest(bus) == [b"1", b"2", b"3"]


async def test_a_malformed_record_is_skipped_and_reported_once() -> None:
    bus = await published([b"1", b"not json", b"3"])
    consumer = bus.consumer([TOPIC], GROUP)
    await consumer.start()
    handler = Handler(failures=1)
    skipped: list[int] = []
    handled: list[int] = []
    step = BatchConsumer(
        consumer,
        parse=parse,
        handle=handler,
        name="test",
        max_records=10,
        poll_seconds=0,
        on_malformed=lambda r: skipped.append(r.offset),
        on_handled=lambda rs: handled.extend(r.offset for r in rs),
    )
    with pytest.raises(ConnectionRefusedError):
        await step.run_once()
    assert await step.run_once() == 3  # the malformed record counts as consumed
    assert handler.calls == [[1, 3], [1, 3]]
    assert skipped == [1]  # parsed once, not again on the retry
    assert handled == [0, 2]
    await consumer.stop()
    assert await committed_rest(bus) == []


async def test_step_goes_on_at_once_when_the_poll_waited() -> None:
    bus = await published([])
    consumer = bus.consumer([TOPIC], GROUP)
    await consumer.start()
    waiting = BatchConsumer(
        consumer, parse=parse, handle=Handler(0), name="t", max_records=1, poll_seconds=0.01
    )
    assert await waiting.step() == 0.0  # the poll itself was the idle wait
    not_waiting = BatchConsumer(
        consumer, parse=parse, handle=Handler(0), name="t", max_records=1, poll_seconds=0
    )
    assert await not_waiting.step() is None  # the loop waits its idle time
    await consumer.stop()


async def test_a_parser_that_fails_unexpectedly_retries_the_same_records() -> None:
    bus = await published([b"1", b"2", b"3"])
    consumer = bus.consumer([TOPIC], GROUP)
    await consumer.start()
    failures = [RuntimeError("projection cache not loaded")]

    def flaky_parse(record: Record) -> int:
        if failures:
            raise failures.pop()
        return parse(record)

    handler = Handler(failures=0)
    step = BatchConsumer(
        consumer, parse=flaky_parse, handle=handler, name="test", max_records=2, poll_seconds=0
    )
    with pytest.raises(RuntimeError):
        await step.run_once()
    assert await step.run_once() == 2  # the same two records, not the next ones
    assert await step.run_once() == 1
    assert handler.calls == [[1, 2], [3]]
    await consumer.stop()
    assert await committed_rest(bus) == []
