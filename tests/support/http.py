"""A real aiohttp server on 127.0.0.1 for tests: `async with serve_on_loopback(app) as port`."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def serve_on_loopback(
    app: web.Application, *, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[int]:
    """Serve `app` on a free loopback port (yielded) and clean it up on exit.

    `handler_cancellation=True` cancels a handler whose client went away, so a test that drops a
    connection mid-response does not leave a handler running past the test.
    """
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        port: int = runner.addresses[0][1]
        yield port
    finally:
        await runner.cleanup()


Recorded = list[tuple[dict[str, str], bytes]]
"""Each request a `recording_receiver` answered: its headers and raw body, in arrival order."""


@contextlib.asynccontextmanager
async def recording_receiver() -> AsyncIterator[tuple[str, Recorded]]:
    """A loopback `POST /hook` that answers 200 `ok` and records what came: yields (url, seen)."""
    seen: Recorded = []

    async def handle(request: web.Request) -> web.Response:
        seen.append((dict(request.headers), await request.read()))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", handle)
    async with serve_on_loopback(app) as port:
        yield f"http://127.0.0.1:{port}/hook", seen
