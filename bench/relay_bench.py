"""Outbox relay events/s to Kafka (tansu on loopback) vs a raw aiokafka producer, same run.

The outbox is filled with N realistic envelopes (~400 B, 200 schedule keys) on PostgreSQL
(`BENCH_POSTGRES_URL` or `TEST_POSTGRES_URL`; a fresh database is created and dropped) or, when
neither is set, a SQLite file. Each round the raw producer sends the same keys and values in
batches of the relay's size (send all, await all acks, acks=all), and the relay drains the
outbox (read batch, publish, mark sent) with the same producer settings. One uncounted warm-up
round, then rounds alternate which side goes first, so machine noise hits both; compare the ratio
(target >= 0.5), not the absolute figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import sqlalchemy as sa
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import KafkaPublisher, Message
from scheduler.adapters.db.engine import create_engine
from scheduler.adapters.db.migrate import upgrade
from scheduler.adapters.db.tables import outbox
from scheduler.adapters.events import OutboxRelay, RelayConfig
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC
from tests.support.kafka import TansuBroker, create_topics

BATCH = RelayConfig().batch_size  # the relay's default; the raw producer sends batches alike
LINGER_MS = 1  # KafkaPublisher's default, set explicitly on both sides
MAX_BATCH_BYTES = 262_144  # likewise
KEYS = 200
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def _rows(n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        key = f"sch_{i % KEYS:026d}"
        event = {
            "id": f"evt_{i:026d}",
            "type": "schedule.run.succeeded",
            "tenant_id": f"tenant-{i % 17}",
            "time": NOW.isoformat(),
            "schedule_id": key,
            "run_id": f"run_{i:026d}",
            "scheduled_for": NOW.isoformat(),
            "data": {"trigger": "schedule", "attempt_count": 1, "note": "x" * 120},
        }
        rows.append(
            {
                "event_id": event["id"],
                "topic": SCHEDULE_EVENTS_TOPIC,
                "key": key,
                "type": event["type"],
                "payload": json.dumps(event, separators=(",", ":")),
                "created_at": NOW,
            }
        )
    return rows


@asynccontextmanager
async def _database() -> AsyncIterator[tuple[str, str]]:
    """(backend name, SQLAlchemy URL) of an empty database, removed afterwards."""
    base = os.environ.get("BENCH_POSTGRES_URL") or os.environ.get("TEST_POSTGRES_URL")
    if not base:
        with tempfile.TemporaryDirectory(prefix="relay-bench-") as tmp:
            yield "sqlite", f"sqlite+aiosqlite:///{Path(tmp) / 'outbox.db'}"
        return
    url = make_url(base)
    name = f"relay_bench_{uuid.uuid4().hex[:10]}"
    admin = url.set(drivername="postgresql", database="postgres").render_as_string(False)
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    try:
        yield "postgresql", url.set(database=name).render_as_string(False)
    finally:
        conn = await asyncpg.connect(admin)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()


@asynccontextmanager
async def _raw_producer(bootstrap: str) -> AsyncIterator[AIOKafkaProducer]:
    """The baseline producer, configured exactly as `KafkaPublisher` configures the relay's
    (acks=all, no idempotence for tansu, the same linger and batch bytes)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        linger_ms=LINGER_MS,
        max_batch_size=MAX_BATCH_BYTES,
    )
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


async def _raw_rate(producer: AIOKafkaProducer, messages: list[Message]) -> float:
    started = time.perf_counter()
    for i in range(0, len(messages), BATCH):
        futures = [
            await producer.send(m.topic, m.value, key=(m.key or "").encode())
            for m in messages[i : i + BATCH]
        ]
        await asyncio.gather(*futures)
    return len(messages) / (time.perf_counter() - started)


async def _refill(engine: AsyncEngine, rows: list[dict[str, Any]]) -> None:
    """A fresh outbox of unsent rows, as the unit of work leaves it (new ids, no dead tuples:
    autovacuum's steady state), so every round starts alike."""
    async with engine.begin() as conn:
        await conn.execute(sa.delete(outbox))
        for i in range(0, len(rows), 5_000):
            await conn.execute(sa.insert(outbox), rows[i : i + 5_000])
    if engine.dialect.name == "postgresql":
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(sa.text("VACUUM ANALYZE outbox"))


@asynccontextmanager
async def _relay(url: str, bootstrap: str) -> AsyncIterator[tuple[AsyncEngine, OutboxRelay]]:
    engine = create_engine(url)
    publisher = KafkaPublisher(
        bootstrap, idempotent=False, linger_ms=LINGER_MS, max_batch_bytes=MAX_BATCH_BYTES
    )
    await publisher.start()
    relay = OutboxRelay(
        engine,
        publisher,
        clock=lambda: datetime.now(UTC),
        config=RelayConfig(batch_size=BATCH),
        registry=CollectorRegistry(),
    )
    try:
        yield engine, relay
    finally:
        await relay.release_leadership()
        await publisher.stop()
        await engine.dispose()


async def _relay_rate(engine: AsyncEngine, relay: OutboxRelay, rows: list[dict[str, Any]]) -> float:
    n = len(rows)
    await _refill(engine, rows)
    # Connected and leading before the clock starts, as the raw producer is started before its.
    assert await relay.acquire_leadership()
    started = time.perf_counter()
    published = await relay.drain(max_batches=n // BATCH + 2)
    elapsed = time.perf_counter() - started
    assert published == n, f"relay published {published} of {n}"
    return n / elapsed


async def _measure(n: int, rounds: int) -> dict[str, Any]:
    broker = TansuBroker()
    broker.start()
    try:
        await create_topics(broker.bootstrap, [SCHEDULE_EVENTS_TOPIC], partitions=4)
        async with _database() as (backend, url):
            await upgrade(url)
            rows = _rows(n)
            messages = [Message(r["topic"], r["key"], r["payload"].encode()) for r in rows]
            raw: list[float] = []
            relayed: list[float] = []
            async with (
                _raw_producer(broker.bootstrap) as producer,
                _relay(url, broker.bootstrap) as (engine, relay),
            ):
                # Round 0 warms both (metadata, connections, prepared statements, the broker's
                # partitions) and is not counted; then the order alternates, so neither side
                # always runs on the heels of the other's broker load.
                for i in range(rounds + 1):
                    if i % 2 == 0:
                        r = await _raw_rate(producer, messages)
                        w = await _relay_rate(engine, relay, rows)
                    else:
                        w = await _relay_rate(engine, relay, rows)
                        r = await _raw_rate(producer, messages)
                    if i > 0:
                        raw.append(r)
                        relayed.append(w)
    finally:
        broker.close()
    raw_median, relay_median = statistics.median(raw), statistics.median(relayed)
    # Each round's pair ran back to back: the median of the pairwise ratios resists the noise of
    # other processes on this 2-core machine better than the ratio of the medians.
    ratios = [r / w for r, w in zip(relayed, raw, strict=True)]
    return {
        "backend": backend,
        "events": n,
        "batch_size": BATCH,
        "rounds": rounds,
        "raw_aiokafka_events_per_s": round(raw_median),
        "relay_events_per_s": round(relay_median),
        "relay_vs_raw": round(statistics.median(ratios), 2),
        "relay_vs_raw_rounds": [round(x, 2) for x in ratios],
        "target_ratio": 0.5,
        "raw_rounds": [round(r) for r in raw],
        "relay_rounds": [round(r) for r in relayed],
    }


def run(quick: bool) -> dict[str, Any]:
    n, rounds = (2_000, 1) if quick else (20_000, 5)
    return asyncio.run(_measure(n, rounds))
