"""A loopback webhook receiver for the observability tests (each run's attempts by X-Webhook-Id)."""

from __future__ import annotations

import asyncio
from collections import Counter

from aiohttp import web


class Endpoint:
    """A loopback webhook receiver: /ok 200; /flaky 503 after 30 ms on a run's first attempt,
    then 200; /fail 500; /gone 404."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.runner: web.AppRunner | None = None
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        run_id = request.headers["X-Webhook-Id"]
        self.seen[run_id] += 1
        if request.path == "/flaky" and self.seen[run_id] == 1:
            await asyncio.sleep(0.03)  # a measurable first attempt for delivery_ms
            return web.Response(status=503)
        status = {"/ok": 200, "/flaky": 200, "/fail": 500}.get(request.path, 404)
        return web.Response(status=status)

    async def __aenter__(self) -> Endpoint:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        assert site._server is not None
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
