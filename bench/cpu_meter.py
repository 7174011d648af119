"""CPU time and peak memory of the processes a benchmark drives, read from /proc (Linux).

- `process_cpu_seconds(pid)`: utime + stime of one process (all its threads), /proc/<pid>/stat.
- `peak_rss_mib(pid)`: VmHWM of /proc/<pid>/status, the resident high-water mark.
- `PostgresCpu`: CPU of the PostgreSQL backends serving ONE database. `pg_stat_activity` names
  the backend pids of that database; their utime + stime come from /proc/<pid>/stat, so the
  figure holds parsing, planning, execution, locking and the commit's WAL flush (which
  pg_stat_statements' timings would miss, and it needs a preload library). It is sampled every
  `interval` seconds through a window: a backend that appears mid-window counts from zero (it
  started there), one that exits counts up to its last sample (up to `interval` of it is lost).
  The meter's own backend is excluded; server-wide processes (checkpointer, WAL writer,
  autovacuum launcher) are not, since other databases share them. Each pid's /proc cmdline
  must name the database, so a server in another PID namespace (a container) is detected and
  the figure is None rather than wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from types import TracebackType

import asyncpg

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float | None:
    """utime + stime of `pid` in seconds, or None once it has exited."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces) in parentheses: utime is field 14.
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _names_database(pid: int, database: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return f" {database} ".encode() in cmdline.replace(b"\0", b" ") + b" "


class PostgresCpu:
    """`async with PostgresCpu(dsn, database) as pg: ...; pg.seconds` (None when unreadable)."""

    def __init__(self, dsn: str, database: str, *, interval: float = 0.1) -> None:
        self.dsn = dsn
        self.database = database
        self.interval = interval
        self._baseline: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._unreadable = False
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.seconds: float | None = None

    async def fetchval(self, query: str) -> object:
        """A query on the meter's own connection, whose backend is not counted (for polling)."""
        assert self._conn is not None
        async with self._lock:
            return await self._conn.fetchval(query)

    def so_far(self) -> float | None:
        """The window's seconds up to the last sample (at most `interval` old)."""
        if self._unreadable:
            return None
        return sum(v - self._baseline.get(pid, 0.0) for pid, v in self._last.items())

    async def _pids(self) -> list[int]:
        assert self._conn is not None
        async with self._lock:
            rows = await self._conn.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
                self.database,
            )
        return [int(r["pid"]) for r in rows]

    async def _sample(self) -> None:
        for pid in await self._pids():
            cpu = process_cpu_seconds(pid)
            if cpu is None:
                continue
            if not _names_database(pid, self.database):
                self._unreadable = True
                continue
            self._last[pid] = cpu

    async def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
            await self._sample()

    async def __aenter__(self) -> PostgresCpu:
        self._conn = await asyncpg.connect(self.dsn)
        await self._sample()
        self._baseline = dict(self._last)
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        assert self._conn is not None
        self._stop.set()
        try:
            await self._task  # its last sample is the window's end
        finally:
            await self._conn.close()
        if not self._unreadable:
            self.seconds = sum(v - self._baseline.get(pid, 0.0) for pid, v in self._last.items())
