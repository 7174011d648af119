"""servicekit's HTTP server against clients that do not read: one that never reads its response
is cut at the write deadline while others are served, and one still uploading a body the server
refused (413 from Content-Length, or a chunked body past the limit) reads the 413 instead of a
reset. Real loopback sockets; outcomes (states, counts, bytes), never durations, are asserted."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from servicekit.http.body_limit import BodyLimitMiddleware
from servicekit.http.server import HttpLimits, http_server
from tests.support.processes import free_port, wait_until

LIMIT_BYTES = 4096
BIG_RESPONSE = 32 * 1024 * 1024  # far above any socket buffer: the server's send buffer fills
# Above the loopback buffers (tcp_rmem max 32 MiB + tcp_wmem max 4 MiB here): the client is
# still sending when the server answers 413 and closes.
BIG_UPLOAD = 64 * 1024 * 1024
DEADLINE = 30.0  # generous bound of every wait, for a loaded 2-core machine


BIG_STARTED: list[int] = []


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/big":
        BIG_STARTED.append(1)
    while (await receive()).get("more_body"):
        pass
    path = scope["path"]
    size = BIG_RESPONSE if path == "/big" else int(path[6:]) if path.startswith("/size/") else 2
    body = b"x" * size
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def running(limits: HttpLimits) -> AsyncIterator[tuple[int, uvicorn.Server]]:
    port = free_port()
    server = http_server(
        BodyLimitMiddleware(app, limit=LIMIT_BYTES), host="127.0.0.1", port=port, limits=limits
    )
    task = asyncio.create_task(server.serve())
    try:
        await wait_until(lambda: server.started or task.done(), 10, "server started")
        assert not task.done(), task
        yield port, server
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, DEADLINE)


def get_small(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as s:
        s.sendall(b"GET /small HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return read_to_end(s)


def read_to_end(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


async def test_a_client_that_never_reads_is_cut_at_the_write_deadline() -> None:
    limits = HttpLimits(write_timeout_seconds=1.0, max_connections=8)
    async with running(limits) as (port, server):
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.settimeout(DEADLINE)
        stalled.connect(("127.0.0.1", port))
        started = len(BIG_STARTED)
        stalled.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")  # and never reads
        await wait_until(lambda: len(BIG_STARTED) > started, DEADLINE, "the big response started")
        # Meanwhile a normal client is served.
        answer = await asyncio.to_thread(get_small, port)
        assert answer.startswith(b"HTTP/1.1 200 ")
        # The stalled connection is aborted (without the deadline it stays open for ever).
        await wait_until(
            lambda: not server.server_state.connections, DEADLINE, "the stalled connection closed"
        )
        received = 0
        with contextlib.suppress(ConnectionResetError):
            while chunk := stalled.recv(1 << 20):
                received += len(chunk)
        stalled.close()
        assert received < BIG_RESPONSE  # cut, not flushed
        assert not server.server_state.tasks  # the app's send returned: nothing hangs


def stalled_client(port: int, path: str) -> socket.socket:
    """A connection that asks for `path` and never reads (a small receive buffer)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(DEADLINE)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return s


async def test_a_closing_connection_with_a_little_left_to_flush_is_cut_too() -> None:
    """The response fits the socket buffers but for less than the transport's high-water mark:
    uvicorn's send never waits (no pause_writing), the keep-alive timeout closes, and close()
    waits to flush what the client never reads. Sizes just past what the kernel takes land
    there; the probe measures that on this machine."""
    # The probe must be measured before its own write deadline cuts it: 5 s, not 1.
    limits = HttpLimits(write_timeout_seconds=5.0, keep_alive_seconds=0.5, max_connections=16)
    async with running(limits) as (port, server):
        probe = stalled_client(port, "/big")
        await wait_until(lambda: bool(server.server_state.connections), DEADLINE, "connected")
        (conn,) = server.server_state.connections
        buffered: list[int] = []

        def settled() -> bool:
            buffered.append(conn.transport.get_write_buffer_size())
            return len(buffered) > 3 and len(set(buffered[-3:])) == 1 and buffered[-1] > 0

        await wait_until(settled, DEADLINE, "the kernel's share of a response measured")
        kernel_takes = BIG_RESPONSE - buffered[-1]
        probe.close()
        await wait_until(lambda: not server.server_state.connections, DEADLINE, "probe closed")
        before = server.server_state.total_requests
        stalled = [
            stalled_client(port, f"/size/{kernel_takes + extra}")
            for extra in (10_000, 30_000, 50_000)
        ]
        try:
            # Their responses are handed to the transport (the probe's never completes) ...
            await wait_until(
                lambda: server.server_state.total_requests == before + len(stalled),
                DEADLINE,
                "answered",
            )
            # ... and the connections end although the clients read nothing.
            await wait_until(
                lambda: not server.server_state.connections, DEADLINE, "every stalled one closed"
            )
        finally:
            for s in stalled:
                s.close()


def upload(port: int, chunked: bool) -> tuple[str, bytes]:
    """Send a request with a BIG_UPLOAD body in full, then read the answer: ('ok', bytes) or
    the error that cut it."""
    piece = b"z" * (1024 * 1024)
    head = b"POST / HTTP/1.1\r\nHost: x\r\n"
    head += (
        b"Transfer-Encoding: chunked\r\n\r\n"
        if chunked
        else b"Content-Length: %d\r\n\r\n" % BIG_UPLOAD
    )
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as s:
            s.sendall(head)
            for _ in range(BIG_UPLOAD // len(piece)):
                s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            if chunked:
                s.sendall(b"0\r\n\r\n")
            return "ok", read_to_end(s)
    except OSError as exc:
        return type(exc).__name__, b""


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_client_still_uploading_reads_the_413_not_a_reset(chunked: bool) -> None:
    async with running(HttpLimits(body_timeout_seconds=DEADLINE)) as (port, server):
        outcome, answer = await asyncio.to_thread(upload, port, chunked)
        assert outcome == "ok", outcome  # before: BrokenPipeError / ConnectionResetError
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:80]
        assert b"/payload-too-large" in answer
        await wait_until(lambda: not server.server_state.connections, DEADLINE, "closed")
        # Served afterwards as usual.
        assert (await asyncio.to_thread(get_small, port)).startswith(b"HTTP/1.1 200 ")


def declare_and_idle(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
        s.sendall(b"z" * 100_000)
        return read_to_end(s)  # EOF once the server closes (a timeout fails the test)


async def test_lingering_ends_when_the_client_stops_sending() -> None:
    """A client that declares a huge body, sends a little and then idles: the server discards
    what came and closes at the body deadline."""
    async with running(HttpLimits(body_timeout_seconds=1.0)) as (port, server):
        answer = await asyncio.to_thread(declare_and_idle, port)
        assert answer.startswith(b"HTTP/1.1 413 ")
        await wait_until(lambda: not server.server_state.connections, DEADLINE, "closed")
