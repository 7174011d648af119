"""`python -m scheduler.entrypoints.workers.worker_process`: one worker process started by the
`scheduler serve --role worker --processes N` parent (supervisor.py); not for direct use.

It is a full `--role worker` runtime (planner, dispatcher, relay, tenant-state consumer,
retention, /healthz /readyz /metrics), configured from the environment it inherits, and differs
only in where it listens and when it stops:

- `--listen-fd`: a loopback socket the parent bound (port 0) and passed down; the child serves
  its health app on it, so children never collide on a port and the parent knows each one's port
  without the child reporting it.
- `--parent-fd`: the read end of a pipe whose only write end is the parent's. The parent never
  writes; when it dies (even by SIGKILL) the kernel closes that end, the read end becomes readable
  (EOF), and the child stops exactly as on SIGTERM: no worker runs on orphaned. A pipe rather than
  PR_SET_PDEATHSIG: portable, and the stop is the graceful one.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys

from scheduler.bootstrap import Container
from scheduler.entrypoints.cli_serve import build
from scheduler.entrypoints.workers.runtime import WorkerRuntime
from scheduler.entrypoints.workers.serve import serve
from servicekit.logging import configure_logging
from servicekit.runtime import event_loop
from servicekit.runtime.gc_tuning import freeze_startup_heap

log = logging.getLogger("scheduler.workers")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scheduler.entrypoints.workers.worker_process")
    p.add_argument("--listen-fd", type=int, required=True)
    p.add_argument("--parent-fd", type=int, required=True)
    p.add_argument("--grace", type=float, required=True)
    p.add_argument("--dev-keys", action="store_true", help="read the dev keys under ./var")
    args = p.parse_args(argv)
    configure_logging(service="scheduler")
    built = build(args.dev_keys)
    if isinstance(built, str):
        print(f"scheduler: {built}", file=sys.stderr)
        return 2
    sock = socket.socket(fileno=args.listen_fd)  # family and type read from the descriptor
    freeze_startup_heap()
    event_loop.run(_serve(built, sock, args.parent_fd, args.grace))
    return 0


async def _serve(container: Container, sock: socket.socket, parent_fd: int, grace: float) -> None:
    stop_when_parent_gone(parent_fd)
    runtime = WorkerRuntime.from_container(container)
    try:
        await serve(
            runtime, grace_seconds=grace, limits=container.settings.http_limits(), sock=sock
        )
    finally:
        await container.aclose()


def stop_when_parent_gone(fd: int) -> None:
    """SIGTERM ourselves (servicekit's serve drains on it) once `fd` reads EOF."""
    loop = asyncio.get_running_loop()

    def gone() -> None:
        loop.remove_reader(fd)
        log.warning("worker process %d: the parent process is gone; stopping", os.getpid())
        os.kill(os.getpid(), signal.SIGTERM)

    loop.add_reader(fd, gone)


if __name__ == "__main__":
    raise SystemExit(main())
