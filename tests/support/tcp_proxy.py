"""A loopback TCP proxy whose link can be cut and restored, to make a database "unreachable for
a while" without touching the shared server (NEVER stop the shared PostgreSQL).

    proxy = TcpProxy("127.0.0.1", 5432)
    await proxy.start()          # listens on 127.0.0.1:proxy.port
    proxy.cut()                  # drops every open connection; new ones are closed at once
    proxy.restore()              # forwards again
    await proxy.stop()

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
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

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

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_cut:
            writer.transport.abort()
            return
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        a = asyncio.create_task(self._pipe(reader, up_writer))
        b = asyncio.create_task(self._pipe(up_reader, writer))
        self._tasks.update((a, b))
        await asyncio.gather(a, b, return_exceptions=True)
        self._tasks.difference_update((a, b))
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ConnectionError):
            while not self.is_cut:
                data = await reader.read(CHUNK)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
