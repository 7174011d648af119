"""The request deadline on a real loopback server: a handler that never answers is answered 503
problem+json with Retry-After at the deadline and is cancelled; a response already started
streams on past it. Outcomes are asserted, never durations."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import aiohttp
from starlette.types import Receive, Scope, Send

from servicekit.http.deadline import RequestDeadlineMiddleware
from servicekit.http.server import HttpLimits, http_server
from servicekit.http.unavailable import RETRY_AFTER_SECONDS
from tests.support.processes import free_port, wait_until

# Long enough that a loaded machine still starts /stream's answer before it (the bound is the
# point of the test, not its speed); /stream then sends for twice as long.
DEADLINE_SECONDS = 2.0
WAIT = 30.0  # the client's patience, generous for a loaded machine


class App:
    def __init__(self) -> None:
        self.cancelled = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/hang":
            try:
                await asyncio.Event().wait()  # a database that never answers
            finally:
                self.cancelled += 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] == "/stream":
            for _ in range(4):  # past the deadline, once started
                await asyncio.sleep(DEADLINE_SECONDS / 2)
                await send({"type": "http.response.body", "body": b"x", "more_body": True})
        await send({"type": "http.response.body", "body": b"done"})


@contextlib.asynccontextmanager
async def running(app: App) -> AsyncIterator[str]:
    port = free_port()
    server = http_server(
        RequestDeadlineMiddleware(app, seconds=DEADLINE_SECONDS),
        host="127.0.0.1",
        port=port,
        limits=HttpLimits(),
    )
    task = asyncio.create_task(server.serve())
    try:
        await wait_until(lambda: server.started or task.done(), 10, "server started")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, WAIT)


async def test_a_hung_handler_is_answered_503_and_cancelled() -> None:
    app = App()
    async with running(app) as base, aiohttp.ClientSession() as s:
        async with s.get(base + "/hang", timeout=aiohttp.ClientTimeout(total=WAIT)) as r:
            assert r.status == 503
            assert r.headers["Content-Type"].startswith("application/problem+json")
            assert r.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
            assert json.loads(await r.text())["type"].endswith("/unavailable")
        await wait_until(lambda: app.cancelled == 1, WAIT, "the handler cancelled")
        async with s.get(base + "/stream", timeout=aiohttp.ClientTimeout(total=WAIT)) as r:
            assert r.status == 200
            assert await r.text() == "xxxxdone"
        async with s.get(base + "/fast", timeout=aiohttp.ClientTimeout(total=WAIT)) as r:
            assert (r.status, await r.text()) == (200, "done")
