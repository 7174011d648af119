"""Loopback webhook receivers for the `scale` benchmark: `python -m bench.scale_receiver PORT ...`
listens on every PORT, answers every POST `200 ok`, and keeps each X-Webhook-Id's arrival times
(wall clock). `GET /_arrivals` returns them as JSON, `DELETE /_arrivals` forgets them.

An HTTP/1.1 parser on an asyncio Protocol rather than the aiohttp server of
dispatch_bench.RECEIVER: the herd is 2,500 requests a second on a 2-core machine that also runs
PostgreSQL, the API and the workers under test, and aiohttp's server does much more per request
(a Request object, routing, a Response, access bookkeeping), CPU the workers would lose. It knows
only what our deliverer sends: Content-Length bodies on keep-alive connections, nothing chunked.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from servicekit.runtime import event_loop

arrivals: dict[str, list[float]] = {}
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def _answer(body: bytes, status: str = "200 OK") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Content-Type: application/json\r\n\r\n" + body


class Receiver(asyncio.Protocol):
    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but they write alike.
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if len(self.buffer) < end + 4 + length:
                return  # the body is still on its way
            self.buffer = self.buffer[end + 4 + length :]
            assert self.transport is not None
            self.transport.write(self._handle(head[0], headers))

    def _handle(self, request_line: str, headers: dict[str, str]) -> bytes:
        method, path = request_line.split(" ", 2)[:2]
        if path == "/_arrivals" and method == "GET":
            return _answer(json.dumps(arrivals).encode())
        if path == "/_arrivals" and method == "DELETE":
            arrivals.clear()
            return _answer(b"{}")
        arrivals.setdefault(headers.get("x-webhook-id", ""), []).append(time.time())
        return OK


async def _serve(ports: list[int]) -> None:
    loop = asyncio.get_running_loop()
    for port in ports:
        await loop.create_server(Receiver, "127.0.0.1", port, backlog=1024)
    await asyncio.Event().wait()


if __name__ == "__main__":
    event_loop.run(_serve([int(p) for p in sys.argv[1:]]))
