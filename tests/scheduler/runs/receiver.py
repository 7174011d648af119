"""A real webhook receiver on loopback (aiohttp.web) whose behaviour is chosen per path:

    /ok            200
    /accept        202 (a callback-mode receiver accepting the job)
    /flaky/N       500 for the first N attempts of each X-Webhook-Id, then 200
    /fail          500 always
    /hang          never answers (until the client times out)
    /hang-first    the first attempt of each X-Webhook-Id never answers, later ones 200
    /redirect      302 to /ok (a follower would be seen at /ok)
    /throttle/S    429 with Retry-After: S on the first attempt, then 200
    /slow/MS       sleeps MS milliseconds, then 200

It records every request (path, headers, body) and the most concurrent requests seen for one
X-Webhook-Id (`max_parallel_per_id`): 2 means a run was delivered twice at once; and the most
requests at once in all (`max_active`).
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from aiohttp import web

MAX_RECORDED = 200_000  # bound memory in long tests


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    requests: list[Seen] = field(default_factory=list)
    attempts_by_id: Counter[str] = field(default_factory=Counter)
    in_flight: Counter[str] = field(default_factory=Counter)
    max_parallel_per_id: int = 0
    active: int = 0
    """Requests being answered now (all paths), and the most at once (`max_active`)."""
    max_active: int = 0
    runner: web.AppRunner | None = None
    port: int = 0
    hang_forever: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def ids_at(self, path_prefix: str) -> set[str]:
        return {s.headers["X-Webhook-Id"] for s in self.requests if s.path.startswith(path_prefix)}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        wid = request.headers.get("X-Webhook-Id", "")
        if len(self.requests) < MAX_RECORDED:
            self.requests.append(Seen(request.path, dict(request.headers), body))
        self.attempts_by_id[wid] += 1
        n = self.attempts_by_id[wid]
        self.in_flight[wid] += 1
        self.max_parallel_per_id = max(self.max_parallel_per_id, self.in_flight[wid])
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            return await self._answer(request.path, n)
        finally:
            self.in_flight[wid] -= 1
            self.active -= 1

    async def _answer(self, path: str, n: int) -> web.StreamResponse:
        parts = path.strip("/").split("/")
        kind = parts[0]
        arg = parts[1] if len(parts) > 1 else "0"
        if kind == "ok":
            return web.Response(text="ok")
        if kind == "accept":
            return web.Response(status=202, text="accepted")
        if kind == "flaky":
            return web.Response(status=500, text="nope") if n <= int(arg) else web.Response()
        if kind == "fail":
            return web.Response(status=500, text="always failing")
        if kind == "nul":  # NUL bytes in the answer (PostgreSQL's text cannot hold NUL)
            return web.Response(body=b"ok\x00\x00done", content_type="text/plain")
        if kind == "big":  # `arg` three-byte characters: a 1 KiB cut falls mid-character
            return web.Response(status=500, text="€" * int(arg))
        if kind == "hang" or (kind == "hang-first" and n == 1):
            await self.hang_forever.wait()
            return web.Response()
        if kind == "hang-first":
            return web.Response(text="ok")
        if kind == "redirect":
            return web.Response(status=302, headers={"Location": "/ok"})
        if kind == "throttle":
            if n == 1:
                return web.Response(status=429, headers={"Retry-After": arg})
            return web.Response()
        if kind == "slow":
            await asyncio.sleep(int(arg) / 1000)
            return web.Response()
        return web.Response(status=404)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        self.hang_forever.set()
        if self.runner is not None:
            await self.runner.cleanup()


def per_id_counts(receiver: Receiver) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for s in receiver.requests:
        out[s.headers["X-Webhook-Id"]] += 1
    return dict(out)
