"""Serve a role: the workers (planner + dispatcher) and/or an HTTP app on one port, through
servicekit's one server helper: on SIGTERM/SIGINT the workers stop claiming, in-flight attempts
finish within `grace_seconds`, the rest are released, then the HTTP server stops.

`scheduler serve --role worker|all` and `python -m scheduler.entrypoints.workers` call
`serve(...)`. With role `all` the given API app is served (it already has /healthz, /readyz and
/metrics) and the workers run beside it; with role `worker` a small health app is served.
`also`: more servers to run and stop with this one (the embedded process's notification API).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

import uvicorn
from fastapi import FastAPI

from scheduler.entrypoints.workers.health_app import create_health_app
from scheduler.entrypoints.workers.runtime import WorkerRuntime
from servicekit.http.server import HttpLimits, http_server
from servicekit.http.server import serve as serve_http


async def serve(
    runtime: WorkerRuntime | None,
    *,
    host: str = "127.0.0.1",
    port: int = 8089,
    app: FastAPI | None = None,
    grace_seconds: float = 10.0,
    limits: HttpLimits,
    also: Sequence[uvicorn.Server] = (),
    sock: socket.socket | None = None,
) -> None:
    """`sock`: a bound socket to serve on instead of `host:port` (a child of `--processes`)."""
    if app is None:
        if runtime is None:
            raise ValueError("nothing to serve")
        app = create_health_app(
            runtime.registry, runtime.container.check_database, runtime.watchdog
        )
    server = http_server(app, host=host, port=port, limits=limits, lifespan="on", sock=sock)

    async def drain() -> None:
        if runtime is not None:
            await runtime.stop(grace_seconds)

    await serve_http(
        [server, *also],
        run=runtime.run if runtime is not None else None,
        drain=drain,
    )
