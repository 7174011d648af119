"""Real service subprocesses for the fault and end-to-end tests, and the one polling helper.

`ServiceProcess` starts `python -m <module> <args>` in a working directory with extra environment,
logs its output to a file there, and waits until an HTTP health path answers 200. Every test that
runs a scheduler worker, a relay, a `serve` command or the embedded process goes through it.

    proc = await ServiceProcess(
        "scheduler.entrypoints.workers", tmp_path, env={...}, args=("--port", "{port}")
    ).start()
    proc.kill()        # SIGKILL: the crash under test
    await proc.aclose()
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Self

import aiohttp

# Bounds on every wait for a process (seconds), sized for a loaded 2-core machine.
START_TIMEOUT_SECONDS = 20.0
EXIT_TIMEOUT_SECONDS = 30.0


def free_port() -> int:
    """A loopback port nobody listens on now (the process binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_until(
    condition: Callable[[], bool | Awaitable[bool]], timeout: float, what: str, every: float = 0.1
) -> None:
    """Poll an outcome (not a duration) until it holds, failing after `timeout` seconds.
    `condition` returns the outcome, a bool, or an awaitable of it."""
    deadline = time.monotonic() + timeout
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if not isinstance(held, bool):
            # An un-awaited coroutine inside a sync lambda, or a count or collection, is truthy
            # or falsy by accident: a test bug, not an outcome.
            raise TypeError(f"condition for {what} returned {type(held).__name__}, not a bool")
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(every)


async def equals(value: Awaitable[object], expected: object) -> bool:
    """For `wait_until`: whether what `value` resolves to equals `expected`."""
    return await value == expected


class ServiceProcess:
    """One subprocess of ours. `{port}` in `args` is replaced by a free port, which
    `health_path` is probed on (None: no health probe, `start` returns once spawned)."""

    def __init__(
        self,
        module: str,
        workdir: Path,
        *,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        health_path: str | None = "/healthz",
        name: str | None = None,
        strip_env_prefixes: tuple[str, ...] = (),
    ) -> None:
        self.module = module
        self.workdir = workdir
        self.env = dict(env or {})
        self.strip_env_prefixes = strip_env_prefixes
        """Inherited variables with these prefixes are not passed on (they would point the child
        at other databases, brokers or keys)."""
        self.port = free_port()
        self.args = [a.replace("{port}", str(self.port)) for a in args]
        self.health_path = health_path
        self.proc: asyncio.subprocess.Process | None = None
        self.log = workdir / f"{name or module.rsplit('.', 1)[-1]}-{self.port}.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, timeout: float = START_TIMEOUT_SECONDS) -> Self:
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                self.module,
                *self.args,
                cwd=self.workdir,
                env={**self._inherited_env(), "PYTHONUNBUFFERED": "1", **self.env},
                stdout=out,
                stderr=out,
            )
        if self.health_path is not None:
            await self.wait_healthy(timeout)
        return self

    def _inherited_env(self) -> dict[str, str]:
        prefixes = self.strip_env_prefixes
        return {k: v for k, v in os.environ.items() if not (prefixes and k.startswith(prefixes))}

    def output(self, tail: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-tail:] if self.log.exists() else ""

    async def status(self, path: str) -> int | None:
        """The HTTP status of GET `path`, or None when nothing answers within 3 s."""
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.get(self.base_url + path, timeout=aiohttp.ClientTimeout(total=3)) as r,
            ):
                return r.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def wait_healthy(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        assert self.health_path is not None
        path = self.health_path

        async def healthy() -> bool:
            assert self.proc is not None
            if self.proc.returncode is not None:
                raise AssertionError(f"{self.module} exited: {self.output()}")
            return await self.status(path) == 200

        await wait_until(healthy, timeout, f"{self.module} on {self.port} healthy")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    async def wait(self, timeout: float = EXIT_TIMEOUT_SECONDS) -> int:
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), timeout)

    async def aclose(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
