"""Slow and hostile HTTP clients for the fault proofs (test_http_fault_processes.py).

`python -m tests.support.slow_clients URL TOKEN PATH` runs the slow clients in a process of their
own, so that the normal clients timed by the test share no event loop with them. `slow_clients`
keeps `header_clients` connections that send a partial request and then trickle
header bytes, and `body_clients` that send complete headers declaring a body and then trickle it;
a client the server closes reconnects within half a second, as an attacker would, until
`duration` is over.
`normal_clients` sends ordinary authenticated GETs back to back. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import resource
import time
from dataclasses import dataclass, field

import aiohttp

TRICKLE_EVERY_SECONDS = 1.0
CONNECT_TIMEOUT_SECONDS = 5.0
# Cut clients come back within this, each on its own: a flood, not a metronome.
RECONNECT_JITTER_SECONDS = 0.5


@dataclass
class Figures:
    held_seconds: list[float] = field(default_factory=list)  # per slow connection, until closed
    still_open: int = 0  # slow connections the server had not closed by `hold_cap`
    connect_failures: int = 0
    latencies: list[float] = field(default_factory=list)  # normal requests that succeeded
    normal_failures: list[str] = field(default_factory=list)

    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("inf")

    def summary(self) -> dict[str, float | int]:
        held = sorted(self.held_seconds)
        return {
            "slow_connections": len(held) + self.still_open,
            "slow_still_open_at_cap": self.still_open,
            "slow_held_max_s": round(held[-1], 2) if held else 0.0,
            "slow_held_median_s": round(held[len(held) // 2], 2) if held else 0.0,
            "connect_failures": self.connect_failures,
            "normal_requests": len(self.latencies),
            "normal_failures": len(self.normal_failures),
            "normal_p50_ms": round(sorted(self.latencies)[len(self.latencies) // 2] * 1000, 1)
            if self.latencies
            else 0.0,
            "normal_p99_ms": round(self.p99() * 1000, 1),
        }


def raise_descriptor_limit(needed: int) -> None:
    """The test process holds every slow client's socket: lift its soft RLIMIT_NOFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


async def _slow_connection(
    host: str, port: int, head: bytes, trickle: bytes, hold_cap: float, figures: Figures
) -> None:
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), CONNECT_TIMEOUT_SECONDS
        )
    except (OSError, TimeoutError):
        figures.connect_failures += 1
        await asyncio.sleep(0.1)
        return
    opened = time.monotonic()

    async def send() -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.write(head)
            for i in range(len(trickle)):
                await asyncio.sleep(TRICKLE_EVERY_SECONDS)
                writer.write(trickle[i : i + 1])
                await writer.drain()

    sender = asyncio.create_task(send())
    try:
        await asyncio.wait_for(reader.read(), hold_cap)
        figures.held_seconds.append(time.monotonic() - opened)
    except TimeoutError:  # before OSError, its base class
        figures.still_open += 1
    except (ConnectionError, OSError):
        figures.held_seconds.append(time.monotonic() - opened)
    finally:
        sender.cancel()
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1.0)


async def _slow_client(
    host: str, port: int, head: bytes, trickle: bytes, until: float, hold_cap: float, f: Figures
) -> None:
    while time.monotonic() < until:
        await _slow_connection(host, port, head, trickle, hold_cap, f)
        await asyncio.sleep(random.uniform(0, RECONNECT_JITTER_SECONDS))


async def _normal_worker(url: str, token: str, until: float, figures: Figures) -> None:
    timeout = aiohttp.ClientTimeout(total=5)
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                async with session.get(url) as r:
                    await r.read()
                    if r.status != 200:
                        figures.normal_failures.append(f"status {r.status}")
                        continue
                figures.latencies.append(time.monotonic() - started)
            except (aiohttp.ClientError, TimeoutError) as exc:
                figures.normal_failures.append(repr(exc))
            await asyncio.sleep(0.02)


async def slow_clients(
    base_url: str,
    token: str,
    path: str,
    *,
    header_clients: int = 1000,
    body_clients: int = 100,
    duration: float = 10.0,
    hold_cap: float = 30.0,
    ready: asyncio.Event | None = None,
) -> Figures:
    """Slow clients against `base_url` for `duration` seconds (`ready` is set once all are
    connecting); a slow connection still open after `hold_cap` seconds counts as `still_open`."""
    host, port = base_url.removeprefix("http://").split(":")
    figures = Figures()
    header_head = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n".encode()
    body_head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
    ).encode()
    trickle_bytes = int(hold_cap / TRICKLE_EVERY_SECONDS) + 5
    until = time.monotonic() + duration
    tasks: list[asyncio.Task[None]] = []
    for i in range(header_clients + body_clients):
        head, trickle = (
            (header_head, b"X" * trickle_bytes)
            if i < header_clients
            else (body_head, b" " * trickle_bytes)
        )
        tasks.append(
            asyncio.create_task(
                _slow_client(host, int(port), head, trickle, until, hold_cap, figures)
            )
        )
        if i % 100 == 99:
            await asyncio.sleep(0.05)  # open them in waves, as a real flood ramps up
    await asyncio.sleep(0.5)
    if ready is not None:
        ready.set()
    await asyncio.wait_for(asyncio.gather(*tasks), hold_cap + duration + 30)
    return figures


async def normal_clients(
    url: str, token: str, *, workers: int = 4, duration: float = 10.0
) -> Figures:
    """`workers` clients sending authenticated GETs of `url` back to back for `duration` s."""
    figures = Figures()
    until = time.monotonic() + duration
    await asyncio.gather(*(_normal_worker(url, token, until, figures) for _ in range(workers)))
    return figures


def main() -> None:
    """Run the slow clients; print "ready" once they are all connecting, then their figures."""
    p = argparse.ArgumentParser()
    p.add_argument("base_url")
    p.add_argument("token")
    p.add_argument("path")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--hold-cap", type=float, default=30.0)
    args = p.parse_args()
    raise_descriptor_limit(4096)

    async def run() -> Figures:
        ready = asyncio.Event()

        async def announce() -> None:
            await ready.wait()
            print("ready", flush=True)

        announcer = asyncio.create_task(announce())
        figures = await slow_clients(
            args.base_url,
            args.token,
            args.path,
            duration=args.duration,
            hold_cap=args.hold_cap,
            ready=ready,
        )
        await announcer
        return figures

    figures = asyncio.run(run())
    print(json.dumps({**figures.summary(), "held_seconds": figures.held_seconds}), flush=True)


if __name__ == "__main__":
    main()
