"""`scheduler serve [--host 127.0.0.1] [--port 8089] [--role api|worker|all] [--dev]
[--processes N]`.

`--dev` generates missing keys under ./var (0600) and migrates the database on start; without it
a missing key refuses start with one line naming it, and migrations are `scheduler migrate`'s job.
`--role worker` runs the planner, the dispatcher, the outbox relay, the tenant-state consumer
and retention, and serves /healthz, /readyz, /metrics; `api` only the HTTP API;
`all` (default) both in one process, the API waking the in-process dispatcher on trigger/replay.
SIGTERM: stop claiming, finish in-flight runs within `--grace` seconds, release the rest, then
stop. `--role worker --processes N` (N > 1; default SCHEDULER_WORKER_PROCESSES) runs N worker
processes under a parent that serves the probes and metrics (workers/supervisor.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable, Sequence

import uvicorn
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from eventbus import InProcessBus
from scheduler.bootstrap import Container, bootstrap
from scheduler.config import MAX_WORKER_PROCESSES, SchedulerSettings
from scheduler.entrypoints.api.app import app_from_container
from scheduler.entrypoints.workers.runtime import WorkerRuntime
from scheduler.entrypoints.workers.serve import serve as serve_role
from scheduler.entrypoints.workers.supervisor_http import run_parent
from servicekit.logging import configure_logging
from servicekit.runtime import event_loop
from servicekit.runtime.gc_tuning import freeze_startup_heap
from servicekit.settings import ConfigError

DEFAULT_GRACE_SECONDS = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--role", choices=["api", "worker", "all"], default="all")
    parser.add_argument("--dev", action="store_true", help="generate dev keys, migrate on start")
    parser.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        help="seconds in-flight runs may take to finish on SIGTERM before they are released",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="--role worker: worker processes under one parent, about one core each "
        f"(1-{MAX_WORKER_PROCESSES}; default SCHEDULER_WORKER_PROCESSES, 1)",
    )


def build(dev: bool, *, bus: InProcessBus | None = None) -> Container | str:
    """The container, or the one-line reason it cannot be built. `bus`: the in-process bus to
    publish to without Kafka (the embedded default shares one with notification)."""
    try:
        return bootstrap(dev=dev, bus=bus)
    except (ConfigError, ValidationError) as exc:
        return _reason(exc)


def _reason(exc: ConfigError | ValidationError) -> str:
    if isinstance(exc, ConfigError):
        return str(exc)
    first = exc.errors()[0]
    return f"invalid setting {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


def worker_processes(args: argparse.Namespace) -> tuple[int, SchedulerSettings | None] | str:
    """How many worker processes to run (with the settings read to decide, when read), or the
    one-line reason the arguments are refused."""
    if args.role != "worker":
        return (1, None) if args.processes in (None, 1) else "--processes needs --role worker"
    try:
        settings = SchedulerSettings().ensure_keys(dev=args.dev)
    except (ConfigError, ValidationError) as exc:
        return _reason(exc)
    n = settings.worker_processes if args.processes is None else args.processes
    if not 1 <= n <= MAX_WORKER_PROCESSES:
        return f"--processes must be 1-{MAX_WORKER_PROCESSES}, got {n}"
    return n, settings


async def serve(
    container: Container,
    *,
    host: str,
    port: int,
    role: str,
    dev: bool,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    also: Sequence[uvicorn.Server] = (),
    around_app: Callable[[FastAPI], Sequence[uvicorn.Server]] | None = None,
) -> None:
    """Serve one role until SIGTERM/SIGINT. Workers (role worker|all) stop first: no new claims,
    in-flight attempts finish within `grace_seconds`, the rest are released. `also`: more
    servers stopped with this one (the embedded process's notification API); `around_app`:
    more servers built around this API app (the embedded process's one-origin gateway)."""
    if dev:
        await container.migrate()
    registry = CollectorRegistry()
    runtime = (
        WorkerRuntime.from_container(container, registry=registry)
        if role in ("worker", "all")
        else None
    )
    app = (
        app_from_container(
            container,
            wake=runtime.wake if runtime else None,
            registry=registry,
            watchdog=runtime.watchdog if runtime else None,
        )
        if role in ("api", "all")
        else None
    )
    if around_app is not None and app is not None:
        also = [*also, *around_app(app)]
    try:
        await serve_role(
            runtime,
            host=host,
            port=port,
            app=app,
            grace_seconds=grace_seconds,
            limits=container.settings.http_limits(),
            also=also,
        )
    finally:
        await container.aclose()


def run(args: argparse.Namespace) -> int:
    configure_logging(service="scheduler")
    processes = worker_processes(args)
    if isinstance(processes, str):
        print(f"scheduler: {processes}", file=sys.stderr)
        return 2
    n, settings = processes
    if n > 1 and settings is not None:
        return run_parent(
            settings,
            processes=n,
            host=args.host,
            port=args.port,
            grace_seconds=args.grace,
            dev=args.dev,
        )
    built = build(args.dev)
    if isinstance(built, str):
        print(f"scheduler: {built}", file=sys.stderr)
        return 2
    freeze_startup_heap()
    # A worker-only process serves no public API: it runs on uvloop where installed (less CPU
    # per delivery); the API roles stay on asyncio's loop (servicekit/runtime/event_loop.py says
    # why).
    runner = event_loop.run if args.role == "worker" else asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(
            serve(
                built,
                host=args.host,
                port=args.port,
                role=args.role,
                dev=args.dev,
                grace_seconds=args.grace,
            )
        )
    return 0
