"""WorkerLoop and WorkerGroup with an injected waiter: waits are recorded, not slept."""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3

import asyncpg
import pytest

from servicekit.runtime.transient import is_transient
from servicekit.runtime.worker import Backoff, WorkerGroup, WorkerLoop, busy_or_idle, wait_event


class RecordingWaiter:
    """Records every requested wait and returns at once (yielding once), unless `block` is set:
    then it waits for the event for real (ended by wake()/stop() in the test)."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.block = False

    async def __call__(self, event: asyncio.Event, seconds: float) -> None:
        self.waits.append(seconds)
        if self.block:
            await event.wait()
        else:
            await asyncio.sleep(0)


class ScriptedStep:
    """Plays a script of results (a number, None or an exception); stops the loop at the end."""

    def __init__(self, *results: float | BaseException | None) -> None:
        self.results = list(results)
        self.calls = 0
        self.loop: WorkerLoop | None = None

    async def __call__(self) -> float | None:
        self.calls += 1
        if not self.results:
            assert self.loop is not None
            self.loop.stop()
            return None
        result = self.results.pop(0)
        if isinstance(result, BaseException):
            raise result
        return result


def make_loop(step: ScriptedStep, waiter: RecordingWaiter, **kwargs: object) -> WorkerLoop:
    loop = WorkerLoop("test", step, idle_seconds=1.0, waiter=waiter, **kwargs)  # type: ignore[arg-type]
    step.loop = loop
    return loop


async def test_step_result_decides_the_wait() -> None:
    waiter = RecordingWaiter()
    step = ScriptedStep(None, 0, 0.25, None)
    await make_loop(step, waiter).run()
    # None -> idle (1.0); 0 -> no wait; 0.25 -> 0.25; None -> idle; the script end stops it.
    assert waiter.waits == [1.0, 0.25, 1.0]
    assert step.calls == 5


async def test_transient_errors_back_off_exponentially_bounded_and_reset() -> None:
    waiter = RecordingWaiter()
    down = OSError("connection refused")
    step = ScriptedStep(down, down, down, down, down, None, down)
    loop = make_loop(step, waiter, backoff_initial_seconds=0.5, backoff_max_seconds=3.0)
    await loop.run()
    assert waiter.waits == [0.5, 1.0, 2.0, 3.0, 3.0, 1.0, 0.5]
    assert loop.failures == 0  # the scripted stop step succeeded


async def test_non_transient_errors_are_logged_with_traceback_and_backed_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    waiter = RecordingWaiter()
    step = ScriptedStep(KeyError("bug"), OSError("down"), None)
    with caplog.at_level(logging.WARNING, logger="servicekit.runtime.worker"):
        await make_loop(step, waiter, outage="database unavailable").run()
    assert waiter.waits == [0.2, 0.4, 1.0]
    bug, outage = caplog.records
    assert bug.levelno == logging.ERROR
    assert bug.exc_info is not None
    assert outage.levelno == logging.WARNING
    assert outage.exc_info is None
    assert "test: database unavailable (down); retrying" in outage.getMessage()


async def test_cancellation_propagates_out_of_a_step() -> None:
    step = ScriptedStep(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await make_loop(step, RecordingWaiter()).run()


async def test_jitter_scales_the_backoff_into_its_upper_half() -> None:
    backoff = Backoff(1.0, 8.0, rng=random.Random(7))
    for failures, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (40, 8.0)]:
        assert ceiling / 2 <= backoff.delay(failures) <= ceiling


async def test_wake_ends_an_idle_wait_and_a_wake_during_the_step_is_kept() -> None:
    steps = 0
    woke_during_step = asyncio.Event()

    async def step() -> float | None:
        nonlocal steps
        steps += 1
        if steps == 1:
            loop.wake()  # arrives while the step runs: the next wait must not sleep
        if steps == 3:
            woke_during_step.set()
        return None

    loop = WorkerLoop("w", step, idle_seconds=3600.0)
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0.01)
    assert steps == 2  # step 1's wake skipped the first idle wait; step 2 waits an hour
    loop.wake()
    await asyncio.wait_for(woke_during_step.wait(), 1.0)
    loop.stop()
    await asyncio.wait_for(task, 1.0)


async def test_stop_ends_idle_start_delay_and_backoff_waits_at_once() -> None:
    async def failing() -> float | None:
        raise OSError("down")

    for loop in (
        WorkerLoop("idle", busy_or_idle(_nothing), idle_seconds=3600.0),
        WorkerLoop("delay", busy_or_idle(_nothing), idle_seconds=1.0, start_delay_seconds=3600),
        WorkerLoop(
            "backoff",
            failing,
            idle_seconds=1.0,
            backoff_initial_seconds=3600,
            backoff_max_seconds=3600,
        ),
    ):
        task = asyncio.create_task(loop.run())
        await asyncio.sleep(0.005)
        loop.stop()
        await asyncio.wait_for(task, 1.0)


async def test_wake_does_not_cut_a_backoff_short() -> None:
    calls = 0

    async def failing() -> float | None:
        nonlocal calls
        calls += 1
        raise OSError("down")

    loop = WorkerLoop(
        "w", failing, idle_seconds=0.0, backoff_initial_seconds=3600, backoff_max_seconds=3600
    )
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0.005)
    loop.wake()
    await asyncio.sleep(0.005)
    assert calls == 1
    loop.stop()
    await asyncio.wait_for(task, 1.0)


async def _nothing() -> int:
    return 0


async def test_busy_or_idle() -> None:
    async def two() -> int:
        return 2

    assert await busy_or_idle(two)() == 0.0
    assert await busy_or_idle(_nothing)() is None


async def test_wait_event_returns_when_set_or_after_the_timeout() -> None:
    event = asyncio.Event()
    await wait_event(event, 0.001)
    event.set()
    await asyncio.wait_for(wait_event(event, 3600), 1.0)


# ---- WorkerGroup -----------------------------------------------------------------------------


async def test_group_restarts_a_crashed_entry_after_the_delay() -> None:
    waiter = RecordingWaiter()
    group = WorkerGroup(restart_delay_seconds=5.0, waiter=waiter)
    runs = 0
    third = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise RuntimeError("cannot start")
        third.set()
        await asyncio.Event().wait()  # runs until cancelled

    group.add("flaky", flaky)
    task = asyncio.create_task(group.run())
    await asyncio.wait_for(third.wait(), 1.0)
    assert waiter.waits == [5.0, 5.0]
    await group.stop(grace_seconds=0.1)
    await asyncio.wait_for(task, 1.0)


async def test_group_does_not_restart_an_entry_that_returned() -> None:
    group = WorkerGroup(waiter=RecordingWaiter())
    runs = 0

    async def once() -> None:
        nonlocal runs
        runs += 1

    group.add("once", once)
    task = asyncio.create_task(group.run())
    await asyncio.sleep(0.005)
    await group.stop(0.1)
    await task
    assert runs == 1


async def test_group_stop_order_stop_then_drain_then_cancel_side_tasks() -> None:
    events: list[str] = []
    group = WorkerGroup(flush_seconds=0.0)
    loop = WorkerLoop("loop", busy_or_idle(_nothing), idle_seconds=3600.0)
    side_cancelled = asyncio.Event()

    async def side() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            events.append("side cancelled")
            side_cancelled.set()
            raise

    async def drain(grace: float) -> None:
        events.append(f"drain {grace} (loop stopping: {loop.stopping})")

    group.add_loop(loop, drain=drain)
    group.add("side", side)
    task = asyncio.create_task(group.run())
    await asyncio.sleep(0.005)
    await group.stop(grace_seconds=0.5)
    await asyncio.wait_for(task, 1.0)
    assert events == ["drain 0.5 (loop stopping: True)", "side cancelled"]


async def test_group_cancels_a_drain_that_outlives_grace_plus_flush() -> None:
    group = WorkerGroup(flush_seconds=0.0)
    finished = False

    async def forever() -> None:
        await asyncio.Event().wait()

    async def slow_drain(grace: float) -> None:
        nonlocal finished
        await asyncio.sleep(3600)
        finished = True

    group.add("stuck", forever, drain=slow_drain)
    task = asyncio.create_task(group.run())
    await asyncio.sleep(0.005)
    await asyncio.wait_for(group.stop(grace_seconds=0.01), 1.0)
    await asyncio.wait_for(task, 1.0)
    assert not finished


async def test_cancelling_the_group_cancels_every_entry() -> None:
    group = WorkerGroup()
    cancelled = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    group.add("forever", forever)
    task = asyncio.create_task(group.run())
    await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


# ---- the classifier --------------------------------------------------------------------------


def _named(module: str, name: str) -> BaseException:
    cls: type[Exception] = type(name, (Exception,), {"__module__": module})
    return cls("x")


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (OSError("refused"), True),
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (sqlite3.OperationalError("database is locked"), True),
        (_named("sqlalchemy.exc", "OperationalError"), True),
        (_named("sqlalchemy.exc", "InterfaceError"), True),
        (_named("sqlalchemy.exc", "IntegrityError"), False),
        (_named("asyncpg.exceptions", "CannotConnectNowError"), True),
        (_named("asyncpg.exceptions", "ConnectionDoesNotExistError"), True),
        (_named("asyncpg.exceptions", "UniqueViolationError"), False),
        (asyncpg.exceptions.InvalidCachedStatementError("cached plan changed"), True),
        (_named("aiokafka.errors", "KafkaConnectionError"), True),
        (_named("aiokafka.errors", "UnknownTopicOrPartitionError"), False),
        (_named("eventbus.errors", "PublishError"), True),
        (_named("eventbus.errors", "EnvelopeError"), False),
        (KeyError("bug"), False),
        (ValueError("bad"), False),
    ],
)
def test_is_transient(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient


async def test_an_owner_supplied_wake_event_ends_the_idle_wait() -> None:
    signal = asyncio.Event()
    steps = 0
    second = asyncio.Event()

    async def step() -> float | None:
        nonlocal steps
        steps += 1
        if steps == 2:
            second.set()
        return None

    loop = WorkerLoop("w", step, idle_seconds=3600.0, wake=signal)
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0.005)
    signal.set()  # e.g. a settle that freed capacity, outside the loop object
    await asyncio.wait_for(second.wait(), 1.0)
    assert not signal.is_set()  # consumed by the wait it ended
    loop.stop()
    await asyncio.wait_for(task, 1.0)
