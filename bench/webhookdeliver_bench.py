"""Signed webhook POSTs/s through `Deliverer` vs a raw aiohttp loop, plus HMAC cost.

Both clients hit the same loopback aiohttp receiver (in this process), with the same
concurrency and the same keep-alive pool limits, alternating rounds so machine noise hits both;
compare the ratio, not the absolute figures.

`cpu_per_attempt` is the client's own cost, which posts/s against a receiver on the same cores
hides: process CPU (time.process_time) per POST on the workers' loop (servicekit.runtime.event_loop:
uvloop where installed) at concurrency 64, against a receiver in another process (so only the
client's CPU counts), for `Deliverer.deliver` and for a hand-written aiohttp POST of the same
headers (signed inline from one message); `deliverer_extra_us` is what the deliverer costs on top.
Beside them, the lower-level paths a switch would weigh: httpcore's connection pool (the
maintained client under httpx) with the same headers, h11 (the sans-I/O parser) on kept-alive
asyncio streams, and a floor no client can beat (HTTP/1.1 written by hand on the same streams, no
parser, timeout or guard).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import socket
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import aiohttp
import h11
import httpcore
from aiohttp import web

import webhookdeliver as wd
from servicekit.runtime import event_loop

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


CPU_CONCURRENCY = 64
CPU_RECEIVER = """
import sys
from aiohttp import web
async def ok(request):
    await request.read()
    return web.Response(text="ok")
app = web.Application()
app.router.add_post("/{tail:.*}", ok)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


async def _cpu_drive(n: int, one: Any) -> float:
    """Process CPU microseconds per call of `one(i)` over n calls, CPU_CONCURRENCY at a time."""
    calls = iter(range(n))

    async def worker() -> None:
        for i in calls:
            await one(i)

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(CPU_CONCURRENCY)))
    return (time.process_time() - started) / n * 1e6


async def _cpu_per_attempt(n: int, rounds: int) -> dict[str, Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    receiver = subprocess.Popen([sys.executable, "-c", CPU_RECEIVER, str(port)])
    url = f"http://127.0.0.1:{port}/hook"
    secret = wd.generate_secret()
    x_key, std_key = secret.encode(), base64.b64decode(secret.removeprefix("whsec_"))
    at = datetime.now(UTC)
    limit = CPU_CONCURRENCY
    deliverer = wd.Deliverer(
        allow_private_networks=True, connector_limit=limit, connector_limit_per_host=limit
    )
    raw = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit))
    timeout = aiohttp.ClientTimeout(total=10)

    async def via_deliverer(i: int) -> None:
        result = await deliverer.deliver(
            wd.Delivery(
                url=url,
                body=b'{"i":%d}' % i,
                secrets=[secret],
                webhook_id=f"run_{i}",
                event_type="schedule.triggered",
                attempt=1,
                context_headers=wd.occurrence_headers(
                    schedule_id="sch_bench", scheduled_for=at, trigger="schedule"
                ),
            )
        )
        assert result.ok, result

    def signed(i: int) -> tuple[bytes, dict[str, str]]:
        """Body and headers as the deliverer sends them, signed inline from one message."""
        body, webhook_id, ts = b'{"i":%d}' % i, f"run_{i}", str(int(time.time()))
        message = f"{webhook_id}.{ts}.".encode() + body
        return body, {
            "X-Schedule-Id": "sch_bench",
            "X-Scheduled-For": at.isoformat().replace("+00:00", "Z"),
            "X-Trigger": "schedule",
            "Content-Type": "application/json",
            "User-Agent": wd.DEFAULT_USER_AGENT,
            "Accept-Encoding": "identity",
            "X-Webhook-Id": webhook_id,
            "X-Timestamp": ts,
            "X-Signature": "sha256=" + hmac.digest(x_key, message, "sha256").hex(),
            "X-Event-Type": "schedule.triggered",
            "X-Attempt": "1",
            "webhook-id": webhook_id,
            "webhook-timestamp": ts,
            "webhook-signature": "v1,"
            + base64.b64encode(hmac.digest(std_key, message, "sha256")).decode(),
        }

    async def via_raw(i: int) -> None:
        body, headers = signed(i)
        async with raw.post(
            url, data=body, headers=headers, timeout=timeout, allow_redirects=False
        ) as r:
            await r.read()
            assert r.status == 200

    pool = httpcore.AsyncConnectionPool(max_connections=limit, max_keepalive_connections=limit)
    pool_timeouts = {"connect": 10.0, "read": 10.0, "write": 10.0, "pool": 10.0}

    async def via_httpcore(i: int) -> None:
        body, headers = signed(i)
        r = await pool.request(
            "POST",
            url,
            headers=list(headers.items()),
            content=body,
            extensions={"timeout": pool_timeouts},
        )
        assert r.status == 200

    streams: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def via_streams(i: int) -> None:
        """The floor: HTTP/1.1 written by hand on kept-alive asyncio streams (no parser beyond
        Content-Length, no timeouts, no guard): what no client can beat, not a candidate."""
        if streams.empty():
            streams.put_nowait(await asyncio.open_connection("127.0.0.1", port))
        reader, writer = streams.get_nowait()
        body, headers = signed(i)
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(
            f"POST /hook HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Length: {len(body)}\r\n{lines}\r\n".encode()
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), head
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        streams.put_nowait((reader, writer))

    h11_streams: asyncio.Queue[
        tuple[asyncio.StreamReader, asyncio.StreamWriter, h11.Connection]
    ] = asyncio.Queue()

    async def via_h11(i: int) -> None:
        """h11 (the sans-I/O HTTP/1.1 parser uvicorn serves with) on kept-alive asyncio
        streams: what a client built on a maintained parser would cost."""
        if h11_streams.empty():
            r, w = await asyncio.open_connection("127.0.0.1", port)
            h11_streams.put_nowait((r, w, h11.Connection(h11.CLIENT)))
        reader, writer, conn = h11_streams.get_nowait()
        body, headers = signed(i)
        request = h11.Request(
            method="POST",
            target="/hook",
            headers=[
                ("Host", f"127.0.0.1:{port}"),
                ("Content-Length", str(len(body))),
                *list(headers.items()),
            ],
        )
        writer.write(
            conn.send(request) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
        )
        status = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.EndOfMessage):
                break
        assert status == 200
        conn.start_next_cycle()
        h11_streams.put_nowait((reader, writer, conn))

    paths = {
        "deliverer": via_deliverer,
        "raw_aiohttp": via_raw,
        "httpcore": via_httpcore,
        "h11_streams": via_h11,
        "streams_floor": via_streams,
    }
    figures: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for _ in range(100):  # the receiver process is up once it answers
            try:
                await via_raw(0)
                break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"the CPU receiver did not start on {url} after 100 tries")
        for one in paths.values():  # warm every pool
            await _cpu_drive(min(n, 300), one)
        order = list(paths)
        for r in range(rounds):  # interleaved, each round in another order
            for name in order[r % len(order) :] + order[: r % len(order)]:
                figures[name].append(await _cpu_drive(n, paths[name]))
    finally:
        await deliverer.close()
        await raw.close()
        await pool.aclose()
        while not streams.empty():
            streams.get_nowait()[1].close()
        while not h11_streams.empty():
            h11_streams.get_nowait()[1].close()
        receiver.terminate()
        try:
            receiver.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a receiver that ignores SIGTERM must not hang the bench
            receiver.kill()
            receiver.wait()
    median = {name: statistics.median(values) for name, values in figures.items()}
    d, p = median["deliverer"], median["raw_aiohttp"]
    return {
        "deliverer_us": round(d, 1),
        "raw_aiohttp_us": round(p, 1),
        "deliverer_extra_us": round(d - p, 1),
        "httpcore_us": round(median["httpcore"], 1),
        "h11_streams_us": round(median["h11_streams"], 1),
        "streams_floor_us": round(median["streams_floor"], 1),
        "httpcore_vs_raw_aiohttp": round(median["httpcore"] / p, 2),
        "h11_vs_raw_aiohttp": round(median["h11_streams"] / p, 2),
        "floor_vs_raw_aiohttp": round(median["streams_floor"] / p, 2),
        **{f"{name}_rounds_us": [round(x, 1) for x in values] for name, values in figures.items()},
        "posts_per_round": n,
        "concurrency": CPU_CONCURRENCY,
        "event_loop": event_loop.loop_name(),
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
    cpu_n, cpu_rounds = (1000, 2) if quick else (6000, 5)
    result["cpu_per_attempt"] = event_loop.run(_cpu_per_attempt(cpu_n, cpu_rounds))
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
