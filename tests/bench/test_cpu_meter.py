"""The benchmark's CPU meter (bench/cpu_meter.py) reads what it claims: a process's own CPU, and
the CPU of the PostgreSQL backends serving one database, its own polling backend excluded."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from bench.cpu_meter import PostgresCpu, peak_rss_mib, process_cpu_seconds
from tests.support.pg import fresh_postgres_database

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
# About a second of backend CPU on an idle core; the assertions below only need a fraction.
HEAVY_QUERY = "SELECT count(*) FROM generate_series(1, 20000000)"


def test_process_cpu_counts_a_child_burning_half_a_second() -> None:
    child = subprocess.Popen([sys.executable, "-c", BURN + "input()\n"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        cpu = 0.0
        while cpu < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
            cpu = process_cpu_seconds(child.pid) or 0.0
        assert 0.45 <= cpu < 5, cpu
        rss = peak_rss_mib(child.pid)
        assert rss is not None
        assert 1 < rss < 500
    finally:
        child.communicate(b"\n", timeout=10)
    assert process_cpu_seconds(child.pid) is None  # exited and reaped


def test_a_missing_process_reads_none() -> None:
    assert process_cpu_seconds(2**22 + 12345) is None
    assert peak_rss_mib(2**22 + 12345) is None
    assert process_cpu_seconds(os.getpid()) is not None


@pytest.mark.postgres
async def test_postgres_cpu_counts_other_backends_of_the_database_only() -> None:
    async with fresh_postgres_database("cpum") as url, fresh_postgres_database("cpuo") as other:
        dsn = make_url(url).set(drivername="postgresql").render_as_string(False)
        other_dsn = make_url(other).set(drivername="postgresql").render_as_string(False)
        name = str(make_url(url).database)

        # Idle: the meter's own polling is not counted.
        async with PostgresCpu(dsn, name, interval=0.05) as idle:
            for _ in range(20):
                await idle.fetchval(HEAVY_QUERY.replace("20000000", "200000"))
        assert idle.seconds is not None
        assert idle.seconds < 0.05, idle.seconds

        # Work in another database is not counted either.
        conn = await asyncpg.connect(other_dsn)
        try:
            async with PostgresCpu(dsn, name, interval=0.05) as elsewhere:
                await conn.fetchval(HEAVY_QUERY)
            assert elsewhere.seconds is not None
            assert elsewhere.seconds < 0.05, elsewhere.seconds
        finally:
            await conn.close()

        # A backend of this database that opens and closes inside the window counts up to its
        # last sample: the query runs long enough to be sampled many times.
        async with PostgresCpu(dsn, name, interval=0.02) as busy:
            conn = await asyncpg.connect(dsn)
            try:
                started = time.monotonic()
                await conn.fetchval(HEAVY_QUERY)
                query_wall = time.monotonic() - started
            finally:
                await conn.close()
        assert busy.seconds is not None
        # CPU cannot exceed the wall time it ran in, and most of a busy backend's time is CPU
        # even on a loaded machine (the lower bound is generous).
        assert 0.1 * query_wall <= busy.seconds <= query_wall + 0.1, (busy.seconds, query_wall)
