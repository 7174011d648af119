"""Signed webhook POSTs/s through `Deliverer` vs a raw aiohttp loop, plus HMAC cost.

Both clients hit the same loopback aiohttp receiver (in this process), with the same
concurrency and the same keep-alive pool limits, alternating rounds so machine noise hits both;
compare the ratio, not the absolute figures.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import aiohttp
from aiohttp import web

import webhookdeliver as wd

BODY = b'{"schedule_id":"sch_bench","payload":"' + b"x" * 200 + b'"}'
CONCURRENCY = 50
LIMIT, LIMIT_PER_HOST = 100, 10


async def _receiver() -> tuple[web.AppRunner, int]:
    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


async def _drive(n: int, one: Any) -> float:
    """Run `one()` n times with CONCURRENCY workers; return requests per second."""
    remaining = n

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await one()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return n / (time.perf_counter() - started)


async def _measure(n: int, rounds: int) -> dict[str, Any]:
    runner, port = await _receiver()
    url = f"http://127.0.0.1:{port}/hook"
    secret = wd.generate_secret()
    deliverer = wd.Deliverer(
        allow_private_networks=True, connector_limit=LIMIT, connector_limit_per_host=LIMIT_PER_HOST
    )
    raw = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=LIMIT, limit_per_host=LIMIT_PER_HOST)
    )
    failures = 0

    async def via_deliverer() -> None:
        nonlocal failures
        result = await deliverer.deliver(
            wd.Delivery(
                url=url,
                body=BODY,
                secrets=[secret],
                webhook_id="run_bench",
                event_type="schedule.triggered",
                attempt=1,
            )
        )
        failures += not result.ok

    async def via_raw() -> None:
        nonlocal failures
        async with raw.post(url, data=BODY, headers={"Content-Type": "application/json"}) as r:
            await r.read()
            failures += r.status != 200

    deliverer_rates: list[float] = []
    raw_rates: list[float] = []
    try:
        await _drive(min(n, 200), via_deliverer)  # warm both pools
        await _drive(min(n, 200), via_raw)
        for _ in range(rounds):
            deliverer_rates.append(await _drive(n, via_deliverer))
            raw_rates.append(await _drive(n, via_raw))
    finally:
        await deliverer.close()
        await raw.close()
        await runner.cleanup()
    d, r = statistics.median(deliverer_rates), statistics.median(raw_rates)
    return {
        "deliverer_posts_per_s": round(d),
        "raw_aiohttp_posts_per_s": round(r),
        "deliverer_vs_raw": round(d / r, 2),
        "failures": failures,
    }


def _sign_us_per_op(iterations: int) -> float:
    body = b"x" * 1024
    secret = wd.generate_secret()
    started = time.perf_counter()
    for i in range(iterations):
        wd.sign(secret, "run_bench", 1_700_000_000 + i, body)
    return (time.perf_counter() - started) / iterations * 1e6


def run(quick: bool) -> dict[str, Any]:
    n, rounds = (500, 1) if quick else (3000, 3)
    result = asyncio.run(_measure(n, rounds))
    result.update(
        {
            "requests_per_round": n,
            "rounds": rounds,
            "concurrency": CONCURRENCY,
            "pool": {"limit": LIMIT, "limit_per_host": LIMIT_PER_HOST},
            "hmac_sign_1kib_us": round(_sign_us_per_op(2_000 if quick else 20_000), 2),
        }
    )
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick=False), indent=2))
