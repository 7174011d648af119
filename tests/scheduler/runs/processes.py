"""Real worker subprocesses (`python -m scheduler.entrypoints.workers`) for the fault proofs."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from tests.scheduler.conftest import HS256_KEY, SECRET_KEY


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WorkerProcess:
    def __init__(self, database_url: str, workdir: Path, *args: str) -> None:
        self.database_url = database_url
        self.workdir = workdir
        self.args = args
        self.port = free_port()
        self.proc: asyncio.subprocess.Process | None = None
        self.log = workdir / f"worker-{self.port}.log"

    async def start(self) -> WorkerProcess:
        env = {
            **os.environ,
            "SCHEDULER_DATABASE_URL": self.database_url,
            "SCHEDULER_SECRET_KEY": SECRET_KEY,
            "AUTH_HS256_KEY": HS256_KEY,
            "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
        }
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "scheduler.entrypoints.workers",
                "--port",
                str(self.port),
                *self.args,
                cwd=self.workdir,
                env=env,
                stdout=out,
                stderr=out,
            )
        await self.wait_healthy()
        return self

    async def status(self, path: str) -> int | None:
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.get(
                    f"http://127.0.0.1:{self.port}{path}", timeout=aiohttp.ClientTimeout(total=3)
                ) as r,
            ):
                return r.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def wait_healthy(self, timeout: float = 20.0) -> None:
        async def healthy() -> bool:
            assert self.proc is not None
            if self.proc.returncode is not None:
                raise AssertionError(f"worker exited: {self.log.read_text()[-3000:]}")
            return await self.status("/healthz") == 200

        await wait_until(healthy, timeout, f"worker on {self.port} healthy")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    async def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), timeout)

    async def aclose(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def wait_until(
    condition: Callable[[], Awaitable[bool]], timeout: float, what: str, every: float = 0.1
) -> None:
    """Poll an outcome (not a duration) until it holds, failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(every)
