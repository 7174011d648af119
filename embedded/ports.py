"""The embedded process's two ports: refuse a busy one up front, and know when both listen.

A busy port is one line naming the port and the flag or variable that changes it, before any
start-up work; the ready banner waits until both servers accept connections, so a pasted curl
never meets "connection refused".
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

READY_TIMEOUT_SECONDS = 60.0  # migrations on a slow disk included
_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Port:
    service: str
    number: int
    flag: str
    variable: str

    def in_use_message(self, host: str) -> str:
        return (
            f"port {self.number} ({self.service}) on {host} is in use; choose another with "
            f"{self.flag} N or {self.variable}=N"
        )


def busy_port(host: str, ports: Sequence[Port]) -> str | None:
    """The one-line reason the first unusable port cannot be bound, or None when all can."""
    numbers = [p.number for p in ports]
    for p in ports:
        if numbers.count(p.number) > 1:
            return f"the ports must differ: {', '.join(f'{q.flag} {q.number}' for q in ports)}"
        if not 0 < p.number < 65536:
            return f"port {p.number} ({p.service}) is out of range; set {p.flag} or {p.variable}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # The same option uvicorn binds with, so a port in TIME_WAIT does not count as busy.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, p.number))
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    return p.in_use_message(host)
                return f"cannot bind {host}:{p.number} ({p.service}): {exc.strerror}"
    return None


async def wait_listening(
    host: str, ports: Sequence[int], within_seconds: float = READY_TIMEOUT_SECONDS
) -> bool:
    """True once every port accepts a TCP connection, False after `within_seconds`."""
    deadline = time.monotonic() + within_seconds
    pending = list(ports)
    while pending:
        if time.monotonic() >= deadline:
            return False
        port = pending[0]
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), timeout=max(0.1, deadline - time.monotonic())
            )
        except (OSError, TimeoutError):
            await asyncio.sleep(_POLL_SECONDS)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        pending.pop(0)
    return True
