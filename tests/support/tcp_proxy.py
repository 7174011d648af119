"""A loopback TCP proxy whose link can be cut and restored, or hung, to make a database
"unreachable for a while" without touching the shared server (NEVER stop the shared PostgreSQL).

    proxy = TcpProxy("127.0.0.1", 5432)
    await proxy.start()          # listens on 127.0.0.1:proxy.port
    proxy.cut()                  # drops every open connection; new ones are closed at once
    proxy.restore()              # forwards again
    proxy.silence()              # a hung link: connections stay open, no byte passes either way
    proxy.resume()               # new connections forward again; the hung ones stay hung
    await proxy.stop()

`silence()` is a peer that vanished without closing (a lost NAT entry, a failed-over server): a
connection open then, or opened while silent, never forwards another byte and is never closed
(until `stop()`); only connections made after `resume()` work. A client with no bound on its
calls waits on the hung ones forever.

Only loopback: it refuses a non-loopback upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress

CHUNK = 65536


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        if not ipaddress.ip_address(upstream_host).is_loopback:
            raise ValueError("tcp_proxy only forwards to loopback addresses")
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.is_cut = False
        self.is_silent = False
        self.accepted = 0
        self.hung = 0
        """Connections hung by `silence()` (open ones and those accepted while silent)."""
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._flows: set[asyncio.Event] = set()  # one per forwarding connection: set = flowing

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def cut(self) -> None:
        self.is_cut = True
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.is_cut = False

    def silence(self) -> None:
        """Hang the link: every open connection stops forwarding for good (it stays open), and
        connections accepted until `resume()` are held open without an upstream."""
        self.is_silent = True
        for flow in self._flows:
            if flow.is_set():
                flow.clear()
                self.hung += 1

    def resume(self) -> None:
        """New connections forward again (the hung ones stay hung)."""
        self.is_silent = False

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_cut:
            writer.transport.abort()
            return
        self.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if self.is_silent:  # accepted, never answered, never closed
                self.hung += 1
                self._writers.add(writer)
                await asyncio.Event().wait()
            await self._forward(reader, writer)
        except asyncio.CancelledError:
            pass  # stop(): asyncio's stream callback must not see a cancelled handler
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.transport.abort()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        flow = asyncio.Event()
        flow.set()
        self._flows.add(flow)
        self._writers.update((writer, up_writer))
        a = asyncio.create_task(self._pipe(reader, up_writer, flow))
        b = asyncio.create_task(self._pipe(up_reader, writer, flow))
        self._tasks.update((a, b))
        try:
            await asyncio.gather(a, b, return_exceptions=True)
        finally:
            for t in (a, b):
                t.cancel()
            self._tasks.difference_update((a, b))
            self._flows.discard(flow)
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.transport.abort()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flow: asyncio.Event
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ConnectionError):
            while not self.is_cut:
                await flow.wait()
                data = await reader.read(CHUNK)
                if not data:
                    break
                await flow.wait()  # a hung connection swallows what it read
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
