"""The `scheduler serve --role worker --processes N` parent: N worker processes, each a full worker
runtime (worker_process.py), sharing the work through the database exactly as N replicas would
(claims and planning with SKIP LOCKED and leases, one relay leader by advisory lock, retention
batches with SKIP LOCKED, the tenant consumer in one Kafka group); the parent opens no database
connection and does no scheduling itself.

Children are `sys.executable -m scheduler.entrypoints.workers.worker_process`, not forks nor
multiprocessing: a fresh interpreter (like multiprocessing's "spawn") never inherits the parent's
event loop, pools or locks, and a plain subprocess gives real pids, exit codes, `pass_fds` for the
two descriptors a child gets, and asyncio-native waiting without pickling or a resource tracker.
Each runs in its own session, so a terminal's Ctrl-C reaches only the parent, which decides.

- A child that exits is started again after a backoff (1 s doubling to 30 s; back to 1 s once a
  child stayed up `STABLE_SECONDS`): one log line and `scheduler_worker_process_restarts_total`.
- `stop()` (the parent's SIGTERM/SIGINT): SIGTERM to every child, wait up to `stop_timeout`
  (2 x grace + margin: a child's drain is the grace for in-flight attempts, then as long again for
  the final writes, servicekit.runtime.worker.WorkerGroup.stop), then SIGKILL whoever is left.
- A SIGKILLed parent leaves no orphans: each child watches a pipe whose write end only the parent
  holds and stops gracefully on its EOF (worker_process.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

log = logging.getLogger("scheduler.workers.supervisor")

CHILD_MODULE = "scheduler.entrypoints.workers.worker_process"
RESTART_INITIAL_SECONDS = 1.0
RESTART_MAX_SECONDS = 30.0
STABLE_SECONDS = 60.0  # a child up this long was healthy: its next restart waits 1 s again
STOP_MARGIN_SECONDS = 5.0
KILL_WAIT_SECONDS = 5.0  # after SIGKILL the kernel reaps at once; bounded anyway


@dataclass
class Child:
    slot: int
    """0..N-1, stable across restarts: the `process` label of its metrics."""
    proc: asyncio.subprocess.Process
    port: int
    """Its loopback port (/healthz, /readyz, /metrics)."""


class WorkerSupervisor:
    def __init__(
        self,
        processes: int,
        *,
        grace_seconds: float,
        dev_keys: bool = False,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.processes = processes
        self.grace_seconds = grace_seconds
        self.stop_timeout = 2 * grace_seconds + STOP_MARGIN_SECONDS
        self.dev_keys = dev_keys
        self.children: dict[int, Child] = {}
        """The live child of each slot (absent while a slot waits to restart)."""
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        registry = registry or CollectorRegistry()
        self.restarts = Counter(
            "scheduler_worker_process_restarts_total",
            "Worker processes started again after one exited (serve --processes).",
            registry=registry,
        )
        alive = Gauge(
            "scheduler_worker_processes_alive",
            "Worker processes running under this parent (serve --processes).",
            registry=registry,
        )
        alive.set_function(lambda: len(self.children))

    async def run(self) -> None:
        """Keep N children running until `stop()`."""
        self._tasks = [
            asyncio.create_task(self._keep(slot), name=f"worker-process-{slot}")
            for slot in range(self.processes)
        ]
        await asyncio.gather(*self._tasks)

    async def stop(self) -> None:
        self._stopping.set()
        for child in list(self.children.values()):
            _signal(child, signal.SIGTERM)
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=self.stop_timeout)
        if pending:
            for child in list(self.children.values()):
                log.warning(
                    "worker process %d (pid %d) still running after %.0f s; killing it",
                    child.slot,
                    child.proc.pid,
                    self.stop_timeout,
                )
                _signal(child, signal.SIGKILL)
            await asyncio.wait(self._tasks, timeout=KILL_WAIT_SECONDS)

    async def _keep(self, slot: int) -> None:
        delay = RESTART_INITIAL_SECONDS
        while not self._stopping.is_set():
            started = time.monotonic()
            code = await self._run_child(slot)
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= STABLE_SECONDS:
                delay = RESTART_INITIAL_SECONDS
            self.restarts.inc()
            log.warning(
                "worker process %d exited (%s); starting it again in %.0f s", slot, code, delay
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            delay = min(delay * 2, RESTART_MAX_SECONDS)

    async def _run_child(self, slot: int) -> str:
        """Start the slot's child and wait for it to exit: how it ended, for the log."""
        try:
            child, parent_end = await self._spawn(slot)
        except OSError as exc:
            return f"could not start: {exc}"
        self.children[slot] = child
        try:
            if self._stopping.is_set():  # stop() ran while it was being started
                _signal(child, signal.SIGTERM)
            code = await child.proc.wait()
        finally:
            del self.children[slot]
            os.close(parent_end)
        return f"pid {child.proc.pid}, " + (f"signal {-code}" if code < 0 else f"exit code {code}")

    async def _spawn(self, slot: int) -> tuple[Child, int]:
        """The child, and the parent's end of its parent-death pipe (closed when it exits)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        read_end, write_end = os.pipe()  # non-inheritable: only `pass_fds` reach the child
        try:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            proc = await asyncio.create_subprocess_exec(
                *self.command(sock.fileno(), read_end),
                pass_fds=(sock.fileno(), read_end),
                start_new_session=True,
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            sock.close()  # the child has its own copy; a dead child's port closes with it
            os.close(read_end)
        log.info("worker process %d started (pid %d, port %d)", slot, proc.pid, port)
        return Child(slot, proc, port), write_end

    def command(self, listen_fd: int, parent_fd: int) -> Sequence[str]:
        dev = ["--dev-keys"] if self.dev_keys else []
        return [
            sys.executable,
            "-m",
            CHILD_MODULE,
            "--listen-fd",
            str(listen_fd),
            "--parent-fd",
            str(parent_fd),
            "--grace",
            str(self.grace_seconds),
            *dev,
        ]


def _signal(child: Child, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.proc.send_signal(sig)
