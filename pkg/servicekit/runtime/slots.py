"""`Slots`: a counting semaphore whose acquire and release are O(1), first come first served.

asyncio.Semaphore.acquire (Python 3.11) asks `locked()`, which scans every waiter; the pipeline
parks up to `held_limit` attempts on its slots, so each acquire and release paid for all of
them. Here a release hands its slot straight to the oldest waiter (no wake-up race, no scan).
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType

__all__ = ["Slots"]


class Slots:
    __slots__ = ("_free", "_waiters")

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("count must be >= 1")
        self._free = count
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def free(self) -> int:
        return self._free

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot as the cancellation came: pass it on
            elif waiter in self._waiters:  # a release may have skipped (and dropped) it already
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the waiter: _free is unchanged
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
