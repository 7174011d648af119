"""servicekit.runtime.slots.Slots: never more holders than slots, first come first served, and a
cancelled waiter neither keeps nor loses a slot."""

from __future__ import annotations

import asyncio

import pytest

from servicekit.runtime.slots import Slots


async def test_holders_never_exceed_the_count_and_all_finish() -> None:
    slots = Slots(3)
    holding = 0
    most = 0

    async def one() -> None:
        nonlocal holding, most
        async with slots:
            holding += 1
            most = max(most, holding)
            await asyncio.sleep(0)
            holding -= 1

    await asyncio.gather(*(one() for _ in range(50)))
    assert most == 3
    assert slots.free == 3


async def test_waiters_are_served_in_arrival_order() -> None:
    slots = Slots(1)
    await slots.acquire()
    order: list[int] = []

    async def one(i: int) -> None:
        async with slots:
            order.append(i)

    tasks = [asyncio.create_task(one(i)) for i in range(5)]
    await asyncio.sleep(0)
    slots.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]


async def test_a_cancelled_waiter_gives_up_its_place_without_taking_a_slot() -> None:
    slots = Slots(1)
    await slots.acquire()
    waiter = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert slots.waiting == 0
    slots.release()
    assert slots.free == 1


async def test_a_waiter_cancelled_after_it_was_handed_the_slot_passes_it_on() -> None:
    slots = Slots(1)
    await slots.acquire()
    first = asyncio.create_task(slots.acquire())
    second = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    slots.release()  # hands the slot to `first`, which has not run yet
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)  # the slot went on to the next waiter
    assert slots.free == 0
    slots.release()
    assert slots.free == 1


def test_count_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Slots(0)


async def test_cancelling_holders_and_waiters_together_raises_only_cancelled_errors() -> None:
    """As the pipeline's stop() cancels every late attempt in one go: a holder's release may
    pass over a waiter already cancelled (and drop it) before that waiter handles its cancel."""
    slots = Slots(1)

    async def hold() -> None:
        async with slots:
            await asyncio.sleep(5)

    tasks = [asyncio.create_task(hold()) for _ in range(4)]
    await asyncio.sleep(0)
    for t in tasks:
        t.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results), results
    assert (slots.free, slots.waiting) == (1, 0)
