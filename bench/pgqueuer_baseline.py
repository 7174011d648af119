"""The dispatch benchmark's outside baseline: what a Python team would write without us, pgqueuer (a
PostgreSQL job queue on asyncpg) plus aiohttp, doing the same job, so our throughput is judged
against an established queue, not only against our own floor script.

Each job is one signed POST with our headers (`webhookdeliver.build_headers`, so every request
carries the same header bytes as ours) to the bench's receiver; a non-2xx status fails the job.
The parent installs pgqueuer's schema with its own installer (`Queries.install`, what
`pgq install` runs) in a database of its own and enqueues the burst; the worker is this module
run as a process (`python -m bench.pgqueuer_baseline DSN CONCURRENCY`, the signing secret in
`BENCH_WEBHOOK_SECRET`), on uvloop as pgqueuer's
CLI (`pgq run`) runs it. It prints `ready` once connected, starts on a `go` line on stdin and
stops on `stop` (or EOF).

In flight: `max_concurrent_tasks=CONCURRENCY` (pgqueuer's per-worker cap, enforced by its
dequeue query) with `batch_size=CONCURRENCY // 2`, the largest batch that cap allows.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from datetime import datetime, timedelta

import aiohttp
import asyncpg
from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from pgqueuer.core.qm import QueueManager
from pgqueuer.domain.models import Job
from pgqueuer.queries import Queries

from webhookdeliver import DEFAULT_USER_AGENT, build_headers, occurrence_headers

ENTRYPOINT = "webhook"
EVENT_TYPE = "schedule.triggered"


async def install(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await Queries.from_asyncpg_connection(conn).install()
    finally:
        await conn.close()


async def enqueue_burst(dsn: str, url: str | list[str], n: int, due: datetime) -> None:
    """n jobs, one per run, all due at `due` (pgqueuer's execute_after is relative to the
    insert's NOW(), one statement so one instant), their URLs spread over `url`'s."""
    urls = [url] if isinstance(url, str) else url
    at = due.isoformat().replace("+00:00", "Z")
    payloads: list[bytes | None] = [
        json.dumps(
            {
                "url": urls[i % len(urls)],
                "id": f"run_P{i:025d}",
                "schedule_id": f"sch_P{i % 100:025d}",
                "scheduled_for": at,
                "body": {"i": i},
            }
        ).encode()
        for i in range(n)
    ]
    conn = await asyncpg.connect(dsn)
    try:
        delay = max(due - datetime.now(due.tzinfo), timedelta(0))
        await Queries.from_asyncpg_connection(conn).enqueue(
            [ENTRYPOINT] * n, payloads, [0] * n, [delay] * n
        )
    finally:
        await conn.close()


OPEN_JOBS = ("SELECT EXISTS (SELECT 1 FROM pgqueuer)", "SELECT count(*) FROM pgqueuer")
"""Jobs not finished (any, how many): pgqueuer deletes a job's row once its completion is
logged."""
SUCCEEDED_JOBS = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"


async def _worker(dsn: str, secret: str, concurrency: int) -> None:
    conn = await asyncpg.connect(dsn)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
    timeout = aiohttp.ClientTimeout(total=10)

    @qm.entrypoint(ENTRYPOINT)
    async def deliver(job: Job) -> None:
        assert job.payload is not None
        spec = json.loads(job.payload)
        body = json.dumps(spec["body"], separators=(",", ":")).encode()
        headers = build_headers(
            secrets=[secret],
            webhook_id=spec["id"],
            event_type=EVENT_TYPE,
            attempt=job.attempts + 1,
            timestamp=int(time.time()),
            body=body,
            user_agent=DEFAULT_USER_AGENT,
            context=occurrence_headers(
                schedule_id=spec["schedule_id"],
                scheduled_for=datetime.fromisoformat(spec["scheduled_for"]),
                trigger="schedule",
            ),
        )
        async with http.post(spec["url"], data=body, headers=headers, timeout=timeout) as r:
            await r.read()
            if not 200 <= r.status < 300:
                raise RuntimeError(f"HTTP {r.status}")

    print("ready", flush=True)
    if (await asyncio.to_thread(sys.stdin.readline)).strip() != "go":
        return
    run = asyncio.create_task(
        qm.run(batch_size=max(concurrency // 2, 1), max_concurrent_tasks=concurrency)
    )
    await asyncio.to_thread(sys.stdin.readline)  # "stop" or EOF
    qm.shutdown.set()
    await run
    await http.close()
    await conn.close()


def main(argv: list[str]) -> None:
    dsn, concurrency = argv[0], int(argv[1])
    secret = os.environ["BENCH_WEBHOOK_SECRET"]
    try:
        import uvloop
    except ImportError:  # pgqueuer's CLI falls back to the stock loop the same way
        asyncio.run(_worker(dsn, secret, concurrency))
    else:
        uvloop.run(_worker(dsn, secret, concurrency))


if __name__ == "__main__":
    main(sys.argv[1:])
