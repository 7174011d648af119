"""`scheduler serve [--host 127.0.0.1] [--port 8089] [--role api|worker|all] [--dev]`.

`--dev` generates missing keys under ./var (0600) and migrates the database on start; without it
a missing key refuses start with one line naming it, and migrations are `scheduler migrate`'s job.
Workers come from bootstrap (`Container.workers`, filled by the runs step); `--role worker` runs
only them, `api` only the HTTP API, `all` (default) both in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

import uvicorn
from pydantic import ValidationError

from scheduler.bootstrap import Container, bootstrap
from scheduler.config import MissingSetting
from scheduler.entrypoints.api.app import app_from_container


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--role", choices=["api", "worker", "all"], default="all")
    parser.add_argument("--dev", action="store_true", help="generate dev keys, migrate on start")


def build(dev: bool) -> Container | str:
    """The container, or the one-line reason it cannot be built."""
    try:
        return bootstrap(dev=dev)
    except MissingSetting as exc:
        return str(exc)
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"invalid setting {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


async def serve(container: Container, *, host: str, port: int, role: str, dev: bool) -> None:
    if dev:
        await container.migrate()
    tasks = [
        asyncio.create_task(factory(container).run(), name="worker")
        for factory in (container.workers if role in ("worker", "all") else [])
    ]
    try:
        if role in ("api", "all"):
            app = app_from_container(container)
            config = uvicorn.Config(app, host=host, port=port, log_level="info", lifespan="on")
            await uvicorn.Server(config).serve()
        elif tasks:
            await asyncio.gather(*tasks)
        else:
            print("scheduler: no workers are configured yet", file=sys.stderr)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await container.aclose()


def run(args: argparse.Namespace) -> int:
    built = build(args.dev)
    if isinstance(built, str):
        print(f"scheduler: {built}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(built, host=args.host, port=args.port, role=args.role, dev=args.dev))
    return 0
