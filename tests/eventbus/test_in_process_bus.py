"""The in-process bus keeps the Kafka contract the services rely on."""

from __future__ import annotations

import asyncio

import pytest

from eventbus import Consumer, InProcessBus, Message, Publisher, PublishError, Record

TOPIC = "schedule-events"


def msg(key: str | None, n: int, topic: str = TOPIC) -> Message:
    return Message(topic=topic, key=key, value=f"{key}:{n}".encode(), headers=(("n", b"%d" % n),))


async def started_publisher(bus: InProcessBus) -> Publisher:
    publisher = bus.publisher()
    await publisher.start()
    return publisher


async def drain(consumer: Consumer, max_records: int = 500) -> list[Record]:
    # timeout 0: everything published is already in memory, so nothing to wait for.
    return await consumer.poll(max_records=max_records, timeout_seconds=0)


async def test_order_is_kept_per_key_and_offsets_are_dense() -> None:
    bus = InProcessBus()
    publisher = await started_publisher(bus)
    await publisher.publish([msg("a", 0), msg("b", 0), msg("a", 1)])
    await publisher.publish([msg("b", 1), msg("a", 2)])
    consumer = bus.consumer([TOPIC], "g")
    await consumer.start()

    records = await drain(consumer)

    assert [r.value for r in records] == [b"a:0", b"b:0", b"a:1", b"b:1", b"a:2"]
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert records[0].headers == (("n", b"0"),)
    assert records[0].key == "a"
    assert {r.partition for r in records} == {0}


async def test_new_group_starts_at_earliest_and_groups_are_independent() -> None:
    bus = InProcessBus()
    publisher = await started_publisher(bus)
    await publisher.publish([msg("a", n) for n in range(3)])
    first, second = bus.consumer([TOPIC], "g1"), bus.consumer([TOPIC], "g2")
    await first.start()
    await second.start()

    got_first = await drain(first)
    await first.commit()
    got_second = await drain(second)

    assert [r.offset for r in got_first] == [0, 1, 2]
    # g1's commit moves only g1: g2 still sees everything.
    assert [r.offset for r in got_second] == [0, 1, 2]


async def test_commit_then_a_new_consumer_resumes_after_the_committed_offset() -> None:
    bus = InProcessBus()
    publisher = await started_publisher(bus)
    await publisher.publish([msg("a", n) for n in range(5)])
    consumer = bus.consumer([TOPIC], "g")
    await consumer.start()
    assert [r.offset for r in await drain(consumer, max_records=2)] == [0, 1]
    await consumer.commit()
    await consumer.stop()

    successor = bus.consumer([TOPIC], "g")
    await successor.start()

    assert [r.offset for r in await drain(successor)] == [2, 3, 4]


async def test_an_uncommitted_batch_is_redelivered_after_stop() -> None:
    bus = InProcessBus()
    publisher = await started_publisher(bus)
    await publisher.publish([msg("a", n) for n in range(4)])
    consumer = bus.consumer([TOPIC], "g")
    await consumer.start()
    await drain(consumer, max_records=1)
    await consumer.commit()
    assert [r.offset for r in await drain(consumer, max_records=2)] == [1, 2]
    await consumer.stop()  # a crash before commit

    successor = bus.consumer([TOPIC], "g")
    await successor.start()

    assert [r.offset for r in await drain(successor)] == [1, 2, 3]


async def test_one_member_of_a_group_owns_a_topic_until_it_stops() -> None:
    bus = InProcessBus()
    publisher = await started_publisher(bus)
    await publisher.publish([msg("a", 0)])
    owner, standby = bus.consumer([TOPIC], "g"), bus.consumer([TOPIC], "g")
    await owner.start()
    await standby.start()

    assert len(await drain(owner)) == 1
    assert await drain(standby) == []  # a single partition is never read by two members
    await owner.stop()

    assert [r.offset for r in await drain(standby)] == [0]


async def test_a_waiting_poll_returns_as_soon_as_a_message_is_published() -> None:
    bus = InProcessBus()
    publisher = await started_publisher(bus)
    consumer = bus.consumer([TOPIC], "g")
    await consumer.start()

    poll = asyncio.create_task(consumer.poll(timeout_seconds=30))
    await asyncio.sleep(0)  # let the poll start waiting
    await publisher.publish([msg("a", 0)])
    # Bounded: a poll that missed the wake-up would run into this limit, far below its own 30 s.
    records = await asyncio.wait_for(poll, 5)

    assert [r.value for r in records] == [b"a:0"]


async def test_poll_returns_at_most_max_records_and_round_robins_topics() -> None:
    bus = InProcessBus()
    publisher = await started_publisher(bus)
    await publisher.publish([msg("a", n, "t1") for n in range(3)] + [msg("a", 9, "t2")])
    consumer = bus.consumer(["t1", "t2"], "g")
    await consumer.start()

    batches = [await drain(consumer, max_records=2) for _ in range(3)]

    assert all(len(b) <= 2 for b in batches)
    assert sorted(r.value for b in batches for r in b) == [b"a:0", b"a:1", b"a:2", b"a:9"]


async def test_a_refused_batch_appends_nothing() -> None:
    bus = InProcessBus(max_message_bytes=10)
    publisher = await started_publisher(bus)
    consumer = bus.consumer([TOPIC], "g")
    await consumer.start()

    with pytest.raises(PublishError, match="exceeds"):
        await publisher.publish([msg("a", 0), Message(TOPIC, "a", b"x" * 11)])

    assert await drain(consumer) == []


async def test_publishing_before_start_or_after_stop_fails() -> None:
    bus = InProcessBus()
    publisher = bus.publisher()
    with pytest.raises(PublishError):
        await publisher.publish([msg("a", 0)])
    await publisher.start()
    await publisher.stop()
    with pytest.raises(PublishError):
        await publisher.publish([msg("a", 0)])


async def test_retention_keeps_at_most_the_bound_and_late_members_start_at_the_oldest_kept() -> (
    None
):
    bus = InProcessBus(max_retained_per_topic=3)
    publisher = await started_publisher(bus)
    await publisher.publish([msg("a", n) for n in range(5)])
    consumer = bus.consumer([TOPIC], "g")
    await consumer.start()

    assert [r.offset for r in await drain(consumer)] == [2, 3, 4]


async def test_a_topic_nobody_subscribes_to_keeps_only_the_smaller_bound() -> None:
    bus = InProcessBus(max_retained_per_topic=10, max_retained_unsubscribed=3)
    publisher = await started_publisher(bus)
    await publisher.publish([msg("a", n) for n in range(8)])
    late = bus.consumer([TOPIC], "late")
    await late.start()
    assert [r.offset for r in await drain(late)] == [5, 6, 7]
    # Subscribed now: the full bound holds for a group that does not commit.
    await publisher.publish([msg("a", n) for n in range(8, 20)])
    assert [r.offset for r in await drain(late)] == list(range(10, 20))


async def test_records_every_group_committed_are_dropped() -> None:
    bus = InProcessBus()
    publisher = await started_publisher(bus)
    consumer = bus.consumer([TOPIC], "g")
    await consumer.start()
    await publisher.publish([msg("a", n) for n in range(3)])
    await drain(consumer)
    await consumer.commit()

    # A group subscribing only now finds the committed records gone (documented retention).
    late = bus.consumer([TOPIC], "late")
    await late.start()
    await publisher.publish([msg("a", 3)])

    assert [r.offset for r in await drain(late)] == [3]


async def test_a_group_that_has_not_committed_holds_its_records() -> None:
    bus = InProcessBus()
    publisher = await started_publisher(bus)
    fast, slow = bus.consumer([TOPIC], "fast"), bus.consumer([TOPIC], "slow")
    await publisher.publish([msg("a", n) for n in range(3)])
    await fast.start()
    await drain(fast)
    await fast.commit()
    await slow.start()

    assert [r.offset for r in await drain(slow)] == [0, 1, 2]


@pytest.mark.parametrize(("max_records", "timeout"), [(0, 1.0), (10_001, 1.0), (1, -1.0)])
async def test_unbounded_polls_are_refused(max_records: int, timeout: float) -> None:
    consumer = InProcessBus().consumer([TOPIC], "g")
    await consumer.start()
    with pytest.raises(ValueError):
        await consumer.poll(max_records=max_records, timeout_seconds=timeout)
