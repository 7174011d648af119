"""The watchdog over a process's worker loops: which of them has not completed a cycle in time.

Every `servicekit.runtime.worker.WorkerLoop` that runs under a `WorkerGroup` (in the group's tasks
or
in tasks they start, such as a pipeline's writer) registers with the group's `Watchdog` for as
long as it runs. After each step that succeeds the loop sets its deadline: the wait it chose
plus one step timeout. A loop whose steps keep failing or hang (a database that does not
answer) therefore passes its deadline, and `/readyz` (`servicekit.http.health`) answers 503 naming
it until a step succeeds again.

The group owns the one step timeout of its loops (`step_timeout_seconds`); a loop may set its
own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Protocol

DEFAULT_STEP_TIMEOUT_SECONDS = 60.0
"""A worker step (one claim, one write, one planning pass) taking longer is cancelled."""


class Watched(Protocol):
    name: str

    @property
    def due_by(self) -> float:
        """The watchdog clock's time by which the loop must complete its next cycle."""
        ...


class Watchdog:
    def __init__(
        self,
        *,
        step_timeout_seconds: float = DEFAULT_STEP_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if step_timeout_seconds <= 0:
            raise ValueError("step_timeout_seconds must be > 0")
        self.step_timeout_seconds = step_timeout_seconds
        self.clock = clock
        self._loops: dict[int, Watched] = {}

    def register(self, loop: Watched) -> None:
        self._loops[id(loop)] = loop

    def unregister(self, loop: Watched) -> None:
        self._loops.pop(id(loop), None)

    @property
    def watched(self) -> list[str]:
        return sorted(loop.name for loop in self._loops.values())

    def overdue(self) -> list[str]:
        """Names of the running loops past their deadline (sorted)."""
        now = self.clock()
        return sorted(loop.name for loop in self._loops.values() if loop.due_by < now)


_CURRENT: ContextVar[Watchdog | None] = ContextVar("servicekit_watchdog", default=None)


def current_watchdog() -> Watchdog | None:
    """The watchdog of the group whose task this is (None outside a group)."""
    return _CURRENT.get()


@contextlib.contextmanager
def watching(watchdog: Watchdog) -> Iterator[None]:
    """Tasks created inside this block (and theirs) register their loops with `watchdog`."""
    token = _CURRENT.set(watchdog)
    try:
        yield
    finally:
        _CURRENT.reset(token)
