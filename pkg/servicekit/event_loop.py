"""The event loop every entrypoint runs on: uvloop where it is installed, else asyncio's own.

    from servicekit.event_loop import run
    run(main())          # instead of asyncio.run(main())

uvloop (libuv) runs the same asyncio programs with less CPU per callback, socket read and
write; the dispatchers are CPU-bound on one core, so that is throughput. It is a production
dependency on Linux and macOS; where it is not installed (Windows has no wheel) the stock loop
runs the same code. `SERVICE_EVENT_LOOP=asyncio` picks the stock loop anyway (to rule uvloop
out when diagnosing). The HTTP servers are uvicorn's `Server.serve()` inside this loop, so
uvicorn's own `loop=` setting never applies.
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
