"""An ASGI app under uvicorn on loopback, in a thread with its own event loop, for tests whose
client blocks (a sync HTTP client cannot share the test's loop):

    with serve_in_thread(build) as base_url:   # build() -> (app, cleanup), run on that loop
        httpx.get(base_url + "/healthz")
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from tests.support.processes import free_port

START_TIMEOUT_SECONDS = 30.0
Build = Callable[[], Awaitable[tuple[ASGIApp, Callable[[], Awaitable[None]]]]]


@contextmanager
def serve_in_thread(build: Build) -> Iterator[str]:
    """Run `build()`'s app under uvicorn in a thread; `build` returns the app and its cleanup."""
    port = free_port()
    ready = threading.Event()
    holder: dict[str, object] = {}

    async def main() -> None:
        app, cleanup = await build()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        )
        holder["server"] = server
        ready.set()
        try:
            await server.serve()
        finally:
            await cleanup()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced by the start-up wait below
            holder["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(START_TIMEOUT_SECONDS), "the app was not built in time"
    server = holder.get("server")
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not (isinstance(server, uvicorn.Server) and server.started):
        assert "error" not in holder, holder["error"]
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)  # waiting for the server thread, not for time
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
