"""The `scale` benchmark's instruments measure what they claim: the receiver counts arrivals per
X-Webhook-Id, the history seeding writes the shape it describes with ids like `new_id`'s and
the run's indexes back, the WAL meter tells this database's WAL from the server's, and options
reach only a benchmark that takes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from bench import scale_history
from bench.dispatch_bench import _container
from bench.scale_bench import WalMeter, arrivals_of, receivers
from scheduler.adapters.db.migrate import upgrade
from servicekit.data.ids import new_id
from tests.support.pg import fresh_postgres_database

ROOT = Path(__file__).resolve().parents[2]


async def test_the_receiver_keeps_each_webhook_ids_arrivals() -> None:
    async with receivers(2) as urls, aiohttp.ClientSession() as http:
        for url, webhook_id in ((urls[0], "a"), (urls[1], "a"), (urls[0], "b")):
            async with http.post(url, data=b'{"x": 1}', headers={"X-Webhook-Id": webhook_id}) as r:
                assert r.status == 200
                assert await r.text() == "ok"
        got = await arrivals_of(urls[0])
        assert {k: len(v) for k, v in got.items()} == {"a": 2, "b": 1}
        async with http.delete(urls[0].rsplit("/", 1)[0] + "/_arrivals") as r:
            assert r.status == 200
        assert await arrivals_of(urls[1]) == {}


def test_options_reach_only_a_benchmark_that_takes_them() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "occurrences", "--herd", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "take no options" in done.stderr


@pytest.mark.postgres
async def test_seeded_history_has_its_shape_ulid_ids_and_its_indexes_back() -> None:
    async with fresh_postgres_database("scale") as url:
        await upgrade(url)
        c = _container(url)
        try:
            before = {name for name, _ in await scale_history._secondary_indexes(c)}
            await scale_history.seed_background(c, 0, 2_000, 2_000)
            after = {name for name, _ in await scale_history._secondary_indexes(c)}
            async with c.engine.connect() as conn:
                row = (
                    await conn.execute(
                        sa.text(
                            "SELECT count(*), count(DISTINCT schedule_id), "
                            "count(DISTINCT tenant_id), sum(attempt_count), "
                            "count(*) FILTER (WHERE status = 'failed'), "
                            "count(*) FILTER (WHERE status = 'skipped'), "
                            "(SELECT count(*) FROM delivery_attempts) FROM runs"
                        )
                    )
                ).one()
                sample = (
                    await conn.execute(sa.text("SELECT id, created_at FROM runs LIMIT 1"))
                ).one()
        finally:
            await c.aclose()
    runs, n_schedules, tenants, attempts, failed, skipped, attempt_rows = row
    assert after == before
    assert (runs, n_schedules, tenants) == (2_000, 100, 10)
    assert attempts == attempt_rows  # one row per counted attempt
    assert failed == 40  # every 50th
    assert 40 <= skipped <= 50  # every 40th, less those already failed
    run_id, created_at = sample
    assert run_id[:14] == new_id("run", at=created_at)[:14]  # the ULID's time part


@pytest.mark.postgres
async def test_the_wal_meter_tells_this_databases_wal_from_the_servers() -> None:
    async with fresh_postgres_database("walm") as url, fresh_postgres_database("walo") as other:
        dsn = make_url(url).set(drivername="postgresql").render_as_string(False)
        other_dsn = make_url(other).set(drivername="postgresql").render_as_string(False)
        mine, theirs = await asyncpg.connect(dsn), await asyncpg.connect(other_dsn)
        try:
            await mine.execute("CREATE TABLE t (x int)")
            await theirs.execute("CREATE TABLE t (x int)")
            async with WalMeter(dsn) as wal:
                start = await wal.mark()
                await theirs.execute("INSERT INTO t SELECT generate_series(1, 20000)")
                middle = await wal.mark()
                await mine.execute("INSERT INTO t SELECT generate_series(1, 20000)")
                end = await wal.mark()
                elsewhere = await wal.bytes_between(start, middle)
                here = await wal.bytes_between(middle, end)
        finally:
            await mine.close()
            await theirs.close()
    assert elsewhere["own"] < elsewhere["server"] / 10
    assert here["own"] > 20_000 * 20  # a heap tuple and its record header each, at least
    assert here["own"] <= here["server"]
    # The meter's temporary slot went with its session: no WAL is held back any more.
    conn = await asyncpg.connect(dsn.rsplit("/", 1)[0] + "/postgres")
    try:
        left = await conn.fetchval(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
            f"bench_scale_{os.getpid()}",
        )
    finally:
        await conn.close()
    assert left == 0
