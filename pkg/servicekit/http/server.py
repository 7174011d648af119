"""The one way both services run their HTTP servers (`scheduler serve`, the worker role,
`notification serve` and the embedded process).

    server = http_server(app, host=host, port=port, limits=settings.http_limits())
    await serve([server], run=workers.run, drain=workers.stop)

`http_server` builds a uvicorn server on `DeadlineH11Protocol` (header and body read deadlines,
a write deadline, a lingering close, a connection cap, see protocol.py) with the keep-alive and
backlog of `limits`; it never installs signal handlers. `serve` owns SIGTERM/SIGINT: on a
signal, or when a server or `run` ends, it awaits `drain()` first (workers stop claiming and
finish), then stops the servers.

The connection cap must fit the process's descriptor limit, or accept() fails with EMFILE
instead of answering 503: the soft RLIMIT_NOFILE is raised towards the hard one as needed (as Go
does at start-up), and a cap that still does not fit is lowered, with one warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import resource
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Literal

import uvicorn
from starlette.types import ASGIApp

from servicekit.http.protocol import HttpLimits, protocol_class

__all__ = ["HttpLimits", "fit_descriptor_limit", "http_server", "serve"]

log = logging.getLogger("servicekit.http")

# Descriptors kept for everything but client connections: database pools, outbound webhooks
# (up to the dispatch concurrency), Kafka, log files.
RESERVED_DESCRIPTORS = 1024
MIN_CONNECTIONS = 16
ACCEPT_BURSTS = 3  # accept batches whose refused connections may not be closed yet


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, sock: socket.socket | None = None) -> None:
        super().__init__(config)
        self._sock = sock

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        await super().serve(sockets if sockets is not None or self._sock is None else [self._sock])

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # signals belong to serve(): workers stop before the servers


def fit_descriptor_limit(limits: HttpLimits, *, reserved: int = RESERVED_DESCRIPTORS) -> HttpLimits:
    """`limits` with a connection cap the descriptor limit can hold, raising the soft limit
    towards the hard one first. asyncio accepts up to `backlog` connections at once before any
    is refused, and a refused one holds its descriptor for a few loop turns: the budget keeps
    room for that burst on top of the cap and the reserve."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = limits.max_connections + ACCEPT_BURSTS * limits.backlog + reserved
    # RLIM_INFINITY is -1 on Linux: compare only finite limits.
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return limits
    backlog = max(MIN_CONNECTIONS, min(limits.backlog, soft // 8))
    reserved = min(reserved, soft // 4)
    cap = max(MIN_CONNECTIONS, soft - ACCEPT_BURSTS * backlog - reserved)
    log.warning(
        "http: RLIMIT_NOFILE %d holds %d connections (backlog %d), not %d; raise the limit or "
        "lower the *_HTTP_MAX_CONNECTIONS setting",
        soft,
        cap,
        backlog,
        limits.max_connections,
    )
    return dataclasses.replace(limits, max_connections=cap, backlog=backlog)


def http_server(
    app: ASGIApp,
    *,
    host: str,
    port: int,
    limits: HttpLimits,
    lifespan: Literal["on", "off"] = "off",
    log_level: str = "warning",
    sock: socket.socket | None = None,
) -> uvicorn.Server:
    """`sock`: an already bound socket to serve on instead of `host:port` (a worker process
    under `--processes` gets its loopback socket from the parent, so ports never collide)."""
    limits = fit_descriptor_limit(limits)
    return _Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            http=protocol_class(limits),
            timeout_keep_alive=limits.keep_alive_seconds,  # type: ignore[arg-type]
            backlog=limits.backlog,
            lifespan=lifespan,
            log_level=log_level,
            log_config=None,
        ),
        sock,
    )


async def serve(
    servers: Sequence[uvicorn.Server],
    *,
    run: Callable[[], Awaitable[None]] | None = None,
    drain: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT or until any server or `run` ends; then `drain()`, then stop
    the servers and wait for them (each bounded by its own shutdown)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watched = [asyncio.create_task(s.serve(), name=f"http:{s.config.port}") for s in servers]
    if run is not None:
        watched.append(asyncio.create_task(_call(run), name="workers"))
    stop_task = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([stop_task, *watched], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if drain is not None:
            await drain()
        for s in servers:
            s.should_exit = True
        stop_task.cancel()
        results = await asyncio.gather(*watched, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                log.error("serve: a task ended with %r", r)


async def _call(run: Callable[[], Awaitable[None]]) -> None:
    await run()
