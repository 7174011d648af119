"""uvloop where it is installed, else asyncio's own loop: `run(main())` for `asyncio.run(main())`.

uvloop (libuv) runs the same asyncio programs with less CPU per callback and socket call. The
worker-only processes run on it (`python -m scheduler.entrypoints.workers`, `scheduler serve
--role worker`), and so do the dispatch benchmark's worker and pgqueuer's baseline. Processes
that serve a public API stay on the stock loop: under uvloop the HTTP servers' accept-time
connection cap (servicekit/http/protocol.py) answers 503 to far fewer of a flood of
connections, the rest wait in the listen backlog until they time out
(tests/servicekit/test_http_fault_processes.py, run with TEST_EVENT_LOOP=uvloop, fails); a
worker's port serves only /healthz, /readyz and /metrics to the cluster.
`SERVICE_EVENT_LOOP=asyncio` picks the stock loop here too.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["ENV_VAR", "loop_factory", "loop_name", "run"]

T = TypeVar("T")
ENV_VAR = "SERVICE_EVENT_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None for asyncio's default loop."""
    if os.environ.get(ENV_VAR, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def loop_name() -> str:
    """Which loop `run` would use: "uvloop" or "asyncio" (logged at start)."""
    return "asyncio" if loop_factory() is None else "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on the chosen loop (Python 3.11 has no `loop_factory=` argument on
    asyncio.run; asyncio.Runner has)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
