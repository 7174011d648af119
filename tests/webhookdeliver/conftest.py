"""Fixtures for the webhookdeliver tests: a network tripwire and loopback receivers.

The tripwire sits below everything the package does: it wraps `socket.socket.connect` /
`connect_ex`, which asyncio's `sock_connect` (and so aiohttp's happy-eyeballs) calls for every
outgoing TCP connection. Any non-loopback destination is refused before a packet leaves and fails
the test, so a broken guard cannot send traffic anywhere but 127.0.0.0/8 or ::1.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from tests.support.http import serve_on_loopback


@dataclass
class ConnectLog:
    """Every outgoing connect attempted during the test, and the refused ones."""

    attempts: list[tuple[str, int]] = field(default_factory=list)
    refused: list[tuple[str, int]] = field(default_factory=list)
    # A test that deliberately drives a connect at the tripwire (to prove pinning) sets this;
    # the connect is still refused before any packet is sent.
    refusals_expected: bool = False


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def connect_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[ConnectLog]:
    log = ConnectLog()
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def check(sock: socket.socket, address: object) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
            host, port = str(address[0]), int(address[1])
            log.attempts.append((host, port))
            if not _is_loopback(host):
                log.refused.append((host, port))
                raise ConnectionRefusedError(f"tripwire: non-loopback connect to {host}:{port}")

    def connect(self: socket.socket, address: object) -> None:
        check(self, address)
        return real_connect(self, address)  # type: ignore[arg-type]

    def connect_ex(self: socket.socket, address: object) -> int:
        check(self, address)
        return real_connect_ex(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    yield log
    assert log.refusals_expected or not log.refused, (
        f"tripwire: non-loopback connects attempted: {log.refused}"
    )


@dataclass
class Receiver:
    """A real aiohttp server on 127.0.0.1 recording what reached it."""

    port: int
    requests: list[tuple[web.Request, bytes]]

    def url(self, path: str = "/hook", host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _ok(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok")


@pytest.fixture
async def start_receiver() -> AsyncIterator[Callable[..., Awaitable[Receiver]]]:
    async with contextlib.AsyncExitStack() as servers:

        async def start(
            handler: Handler = _ok, ssl_context: ssl.SSLContext | None = None
        ) -> Receiver:
            requests: list[tuple[web.Request, bytes]] = []

            async def record(request: web.Request) -> web.StreamResponse:
                requests.append((request, await request.read()))
                return await handler(request)

            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", record)
            port = await servers.enter_async_context(
                serve_on_loopback(app, ssl_context=ssl_context)
            )
            return Receiver(port=port, requests=requests)

        yield start
