"""Serve a role: the workers (planner + dispatcher) and/or an HTTP app on one port, with SIGTERM
and SIGINT handled here: stop claiming, let in-flight attempts finish within `grace_seconds`,
release the rest, then stop the HTTP server.

`scheduler serve --role worker|all` and `python -m scheduler.entrypoints.workers` call
`serve(...)`. With role `all` the given API app is served (it already has /healthz, /readyz and
/metrics) and the workers run beside it; with role `worker` a small health app is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from scheduler.entrypoints.workers.health_app import create_health_app
from scheduler.entrypoints.workers.runtime import WorkerRuntime

log = logging.getLogger("scheduler.serve")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # signals are ours: the workers must stop before the server


async def serve(
    runtime: WorkerRuntime | None,
    *,
    host: str = "127.0.0.1",
    port: int = 8089,
    app: FastAPI | None = None,
    grace_seconds: float = 10.0,
) -> None:
    if app is None:
        if runtime is None:
            raise ValueError("nothing to serve")
        app = create_health_app(runtime.registry, runtime.container.check_database)
    server = _Server(
        uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="on", log_config=None
        )
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server_task = asyncio.create_task(server.serve(), name="http")
    worker_task = asyncio.create_task(runtime.run(), name="workers") if runtime else None
    watched = [t for t in (server_task, worker_task) if t is not None]
    stop_task = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([stop_task, *watched], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if runtime is not None:
            await runtime.stop(grace_seconds)
        server.should_exit = True
        stop_task.cancel()
        results = await asyncio.gather(*watched, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                log.error("serve: a task ended with %r", r)
