"""The one worker-loop skeleton of both services (after procrastinate's `Worker.run`).

`WorkerLoop` repeats one step until `stop()`:

- `step()` returns how long to wait before the next step: 0 runs it again at once (after yielding
  to the event loop), a positive number waits that long, None waits `idle_seconds`. These waits
  end early on `wake()` or `stop()`; a `wake()` that arrives during a step is kept, so the next
  wait returns at once and work signalled meanwhile is never slept through.
- An exception from a step never ends the loop: a transient one (`errors.is_transient`: the
  database or the bus is unreachable) is logged as a warning, any other with its traceback; both
  wait an exponential, bounded backoff (ended early only by `stop()`, so wake-ups from producers
  do not turn an outage into a spin) and the first step that succeeds resets it. One bug in one
  step must not silently take down a worker that every tenant's work depends on; the traceback
  at each retry keeps it loud. `asyncio.CancelledError` (and any BaseException) propagates.
- Each step is bounded: one taking longer than the step timeout (the loop's own, else its
  group's watchdog's, `servicekit.runtime.watchdog`) is cancelled, logged as a warning with the
  loop's
  name and counted as a failure. Under a `WorkerGroup` the loop registers with the group's
  watchdog while it runs: `/readyz` is 503 while it has not completed a cycle in time.

`WorkerGroup` runs named entries (loops, or any `run()` coroutine with an optional `stop()` and
drain hook) and side tasks: an entry whose `run()` raises is logged and started again after
`restart_delay_seconds`; `stop(grace)` stops every entry, awaits every drain hook, then cancels
what is left. It is the one SIGTERM path of `scheduler serve` and `notification serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from servicekit.runtime.backoff import backoff_ceiling, jittered
from servicekit.runtime.transient import is_transient
from servicekit.runtime.watchdog import (
    DEFAULT_STEP_TIMEOUT_SECONDS,
    Watchdog,
    current_watchdog,
    watching,
)

log = logging.getLogger("servicekit.runtime.worker")

Step = Callable[[], Awaitable[float | None]]


class Waiter(Protocol):
    """Wait until `event` is set or `seconds` have passed (tests inject one that records)."""

    async def __call__(self, event: asyncio.Event, seconds: float) -> None: ...


async def wait_event(event: asyncio.Event, seconds: float) -> None:
    if event.is_set():
        return
    if seconds <= 0:
        await asyncio.sleep(0)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


def busy_or_idle(step: Callable[[], Awaitable[int]]) -> Step:
    """Adapt a step that returns how many items it handled: go again at once after a busy step,
    wait the idle time after an empty one."""

    async def adapted() -> float | None:
        return 0.0 if await step() else None

    return adapted


class Backoff:
    """servicekit's backoff formula (`runtime.backoff`) with multiplier 2: the ceiling is
    initial * 2**(failures - 1), capped at `max_seconds`; with `rng`, drawn from its upper half
    so replicas that failed together do not retry in step, yet none comes straight back."""

    def __init__(
        self, initial_seconds: float, max_seconds: float, *, rng: random.Random | None = None
    ) -> None:
        if initial_seconds <= 0 or max_seconds < initial_seconds:
            raise ValueError("backoff needs 0 < initial_seconds <= max_seconds")
        self.initial_seconds = initial_seconds
        self.max_seconds = max_seconds
        self.rng = rng

    def delay(self, failures: int) -> float:
        ceiling = backoff_ceiling(
            failures, initial_seconds=self.initial_seconds, max_seconds=self.max_seconds
        )
        return jittered(ceiling, self.rng, floor=0.5) if self.rng is not None else ceiling


class StepTimedOut(Exception):
    """A step ran past the loop's step timeout and was cancelled."""


class WorkerLoop:
    def __init__(
        self,
        name: str,
        step: Step,
        *,
        idle_seconds: float,
        backoff_initial_seconds: float = 0.2,
        backoff_max_seconds: float = 5.0,
        start_delay_seconds: float = 0.0,
        jitter: random.Random | None = None,
        outage: str = "unavailable",
        logger: logging.Logger | None = None,
        waiter: Waiter = wait_event,
        wake: asyncio.Event | None = None,
        step_timeout_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`wake`: an event the owner sets to end idle waits (its own one by default), for an
        owner that signals new work from several places. `step_timeout_seconds`: None takes
        the group watchdog's (DEFAULT_STEP_TIMEOUT_SECONDS outside a group). `clock`: the
        monotonic clock of the watchdog deadline (the watchdog's, under a group)."""
        if idle_seconds < 0 or start_delay_seconds < 0:
            raise ValueError("idle_seconds and start_delay_seconds must be >= 0")
        if step_timeout_seconds is not None and step_timeout_seconds <= 0:
            raise ValueError("step_timeout_seconds must be > 0")
        self.name = name
        self.step = step
        self.idle_seconds = idle_seconds
        self.backoff = Backoff(backoff_initial_seconds, backoff_max_seconds, rng=jitter)
        self.start_delay_seconds = start_delay_seconds
        self.outage = outage
        self.log = logger or log
        self.failures = 0
        """Consecutive failed steps (0 after a success)."""
        self._wait = waiter
        self._wake = wake if wake is not None else asyncio.Event()
        self._stop = asyncio.Event()
        self.step_timeout_seconds = step_timeout_seconds
        self._clock = clock
        self._timeout = step_timeout_seconds or DEFAULT_STEP_TIMEOUT_SECONDS
        self._due_by = float("inf")  # no deadline until run() starts

    @property
    def due_by(self) -> float:
        """When the next cycle must have completed (the watchdog's deadline; inf: not running)."""
        return self._due_by

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wake(self) -> None:
        """New work may be there: end the current idle wait (or the next one) early."""
        self._wake.set()

    def stop(self) -> None:
        """End the loop after the current step (a wait in progress ends at once)."""
        self._stop.set()
        self._wake.set()

    async def run(self) -> None:
        watchdog = current_watchdog()
        if watchdog is not None:
            self._clock = watchdog.clock
            self._timeout = self.step_timeout_seconds or watchdog.step_timeout_seconds
            watchdog.register(self)
        self._due_by = self._clock() + self.start_delay_seconds + self._timeout
        try:
            await self._run()
        finally:
            self._due_by = float("inf")
            if watchdog is not None:
                watchdog.unregister(self)

    async def _bounded_step(self) -> float | None:
        try:
            async with asyncio.timeout(self._timeout) as scope:
                return await self.step()
        except TimeoutError:
            if scope.expired():
                raise StepTimedOut from None
            raise

    async def _run(self) -> None:
        if self.start_delay_seconds:
            await self._wait(self._stop, self.start_delay_seconds)
        while not self._stop.is_set():
            try:
                pause = await self._bounded_step()
            except Exception as exc:
                self.failures += 1
                delay = self.backoff.delay(self.failures)
                if isinstance(exc, StepTimedOut):
                    self.log.warning(
                        "%s: step took longer than %.1f s and was cancelled; retrying in %.2f s",
                        self.name,
                        self._timeout,
                        delay,
                    )
                elif is_transient(exc):
                    self.log.warning(
                        "%s: %s (%s); retrying in %.2f s",
                        self.name,
                        self.outage,
                        exc if str(exc) else type(exc).__name__,  # a timeout has no message
                        delay,
                    )
                else:
                    self.log.exception(
                        "%s: step failed; retrying in %.2f s (failure %d)",
                        self.name,
                        delay,
                        self.failures,
                    )
                await self._wait(self._stop, delay)
                continue
            self.failures = 0
            wait = self.idle_seconds if pause is None else max(pause, 0.0)
            self._due_by = self._clock() + wait + self._timeout
            if self._stop.is_set():
                return
            if pause is not None and pause <= 0:
                await asyncio.sleep(0)  # let the tasks this step started run
                continue
            await self._wait(self._wake, wait)
            # Cleared after the wait, not before the step: a wake during the step is kept.
            if not self._stop.is_set():
                self._wake.clear()


@dataclass
class _Entry:
    name: str
    run: Callable[[], Awaitable[None]]
    stop: Callable[[], None] | None
    drain: Callable[[float], Awaitable[None]] | None
    task: asyncio.Task[None] | None = None


class WorkerGroup:
    """Supervise named entries until `stop()`:

        group = WorkerGroup()
        group.add_loop(planner_loop)
        group.add("dispatcher", dispatcher.run, drain=dispatcher.stop)
        group.add("queue-depth", depth_loop.run, stop=depth_loop.stop)
        task = asyncio.create_task(group.run())
        ...
        await group.stop(grace_seconds=10)    # then `task` ends

    An entry without `stop` is a side task: it is cancelled once the drain hooks are done.
    """

    def __init__(
        self,
        *,
        restart_delay_seconds: float = 5.0,
        flush_seconds: float | None = None,
        logger: logging.Logger | None = None,
        waiter: Waiter = wait_event,
        watchdog: Watchdog | None = None,
    ) -> None:
        """`watchdog`: what the loops run under this group register with (their step timeout
        and the readiness check, `servicekit.http.health.loops_ready`); a new one by default."""
        self.restart_delay_seconds = restart_delay_seconds
        self.watchdog = watchdog or Watchdog()
        self.flush_seconds = flush_seconds
        """How long past the grace a drain hook may take to write what it finished; None: as
        long as the grace again, at least 1 s (the dispatcher's bound on its final flush)."""
        self.log = logger or log
        self._wait = waiter
        self._entries: list[_Entry] = []
        self._stopping = asyncio.Event()
        self._done = asyncio.Event()
        self._running = False

    def add(
        self,
        name: str,
        run: Callable[[], Awaitable[None]],
        *,
        stop: Callable[[], None] | None = None,
        drain: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        """`run` is called again after a crash; `drain(grace)` is awaited at stop and must bound
        itself by the grace it is given (plus a flush)."""
        if self._running:
            raise RuntimeError("add entries before run()")
        self._entries.append(_Entry(name, run, stop, drain))

    def add_loop(
        self, loop: WorkerLoop, *, drain: Callable[[float], Awaitable[None]] | None = None
    ) -> None:
        self.add(loop.name, loop.run, stop=loop.stop, drain=drain)

    @property
    def names(self) -> list[str]:
        return [e.name for e in self._entries]

    async def run(self) -> None:
        """Run every entry until `stop()` has finished (or this task is cancelled, which cancels
        every entry at once)."""
        self._running = True
        with watching(self.watchdog):  # the entries' tasks (and theirs) see the watchdog
            for entry in self._entries:
                entry.task = asyncio.create_task(self._supervise(entry), name=entry.name)
        try:
            await self._done.wait()
        finally:
            tasks = [e.task for e in self._entries if e.task is not None]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._running = False

    async def _supervise(self, entry: _Entry) -> None:
        while not self._stopping.is_set():
            try:
                await entry.run()
                return
            except Exception:
                if self._stopping.is_set():
                    return
                self.log.exception(
                    "%s stopped with an error; restarting in %.1f s",
                    entry.name,
                    self.restart_delay_seconds,
                )
                await self._wait(self._stopping, self.restart_delay_seconds)

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop every entry, await the drain hooks (each given `grace_seconds`, waited for up to
        the grace plus `flush_seconds`), give the stopped entries what is left of that, then
        cancel whatever still runs."""
        if self._stopping.is_set():
            await self._done.wait()
            return
        self._stopping.set()
        loop = asyncio.get_running_loop()
        flush = self.flush_seconds
        deadline = (
            loop.time() + grace_seconds + (max(grace_seconds, 1.0) if flush is None else flush)
        )
        for entry in self._entries:
            if entry.stop is not None:
                entry.stop()
        drains = [
            asyncio.create_task(_await(e.drain(grace_seconds)), name=f"{e.name}-drain")
            for e in self._entries
            if e.drain is not None
        ]
        if drains:
            _, late = await asyncio.wait(drains, timeout=max(deadline - loop.time(), 0.0))
            for t in late:
                self.log.warning("%s did not finish in time; cancelled", t.get_name())
                t.cancel()
            for result in await asyncio.gather(*drains, return_exceptions=True):
                if isinstance(result, Exception):
                    self.log.error("a drain hook failed: %r", result)
        stopped = [
            e.task
            for e in self._entries
            if e.task is not None and (e.stop is not None or e.drain is not None)
        ]
        if stopped:
            await asyncio.wait(stopped, timeout=max(deadline - loop.time(), 0.0))
        for e in self._entries:
            if e.task is not None and not e.task.done():
                e.task.cancel()
        await asyncio.gather(
            *(e.task for e in self._entries if e.task is not None), return_exceptions=True
        )
        self._done.set()


async def _await(awaitable: Awaitable[None]) -> None:
    await awaitable
