"""The outbox relay (DESIGN §9): publishes unsent outbox rows to the bus, then marks them sent.

One step reads up to `batch_size` unsent rows in id order, publishes them with ONE
`Publisher.publish(batch)` (Kafka: acks=all; key = schedule id, so the bus keeps the order per
schedule) and only then sets `sent_at` on exactly those ids. Consequences:

- Broker down: `publish` raises, nothing is marked, the rows wait; the loop retries with bounded
  exponential backoff (with jitter) and never drops a row.
- Killed between publish and mark-sent: the next relay publishes the same rows again, with the
  same event `id`s (at-least-once; consumers deduplicate by `id`).
- Rows are marked by their ids, never by an id range: on PostgreSQL a lower id may commit after a
  higher one was relayed, and a range would mark it sent unpublished.

Replicas (PostgreSQL): one ACTIVE relay per database, chosen by a session-level advisory lock
(`pg_try_advisory_lock`). The leader does all its reads and writes on the very connection that
holds the lock, so it cannot keep relaying after losing it (a dropped connection fails the step
and releases the lock at once); standbys retry every `standby_retry_seconds`. A single active
relay keeps the order per key across replicas, which `FOR UPDATE SKIP LOCKED` claiming by several
relays would not (two relays could publish two events of one schedule out of order).
SQLite: one process, so every step simply runs in its own short transaction (the engine has one
pooled connection, which this relay never holds while publishing).

Order per schedule follows the outbox id (the commit order of the schedule's own writes, which
are serialised by its row). Events of one schedule written by concurrent transactions that do not
touch the schedule row may be relayed in commit order instead of id order.

A pass of the loop drains batches for at most `pass_seconds` (then refreshes the lag metrics and
goes on at once): a long backlog behind a slow bus never runs into the loop's step timeout,
whose cancellation would republish the batch in flight.

The relay never deletes: sent rows are the retention worker's (service_layer/retention.py,
`SCHEDULER_OUTBOX_RETENTION_SECONDS`). Lag metrics (`scheduler_outbox_unsent`,
`scheduler_outbox_oldest_unsent_age_seconds`) are refreshed by every replica, so whichever
process is scraped shows the backlog.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from prometheus_client import CollectorRegistry
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus import MAX_MESSAGE_BYTES, Message, Publisher, PublishError
from scheduler.adapters.db.tables import outbox
from scheduler.adapters.events.relay_metrics import RelayMetrics
from servicekit.runtime.worker import WorkerLoop

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

# Advisory-lock key of the relay (any fixed bigint; advisory locks are per database).
RELAY_LOCK_KEY = zlib.crc32(b"scheduler.outbox_relay")

MAX_BATCH_SIZE = 10_000  # eventbus polls at most 10,000 records; one batch stays well in memory

_ASYNC_COMMIT = sa.text("SELECT set_config('synchronous_commit', 'off', true)")
_MARK_SENT_PG = (
    sa.update(outbox)
    .where(outbox.c.id == sa.func.any(sa.bindparam("ids", type_=pg.ARRAY(sa.BigInteger()))))
    .values(sent_at=sa.bindparam("now", type_=outbox.c.sent_at.type))
)


@dataclass(frozen=True)
class RelayConfig:
    """Relay tuning; every value is bounded (see `__post_init__`)."""

    # Rows per publish: ~1,000 envelopes of ~1 KiB fill a few Kafka produce requests; fewer,
    # larger batches cut per-batch round trips (relay bench: 0.45 -> 0.54 of raw vs 500).
    batch_size: int = 1000
    # How long an idle relay waits for `wake()` before looking again.
    poll_interval_seconds: float = 0.2
    # Backoff after a failed step: initial * 2**(n-1), capped, with jitter in [50%, 100%].
    retry_initial_seconds: float = 0.5
    retry_max_seconds: float = 30.0
    # How often the lag gauges are recomputed (one COUNT over the unsent partial index).
    metrics_interval_seconds: float = 5.0
    # How often a standby tries to take over the advisory lock.
    standby_retry_seconds: float = 2.0
    # A pass reads no further batch after this long; well under the loop's step timeout (60 s).
    pass_seconds: float = 10.0
    lock_key: int = RELAY_LOCK_KEY

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be 1..{MAX_BATCH_SIZE}")
        for name in (
            "poll_interval_seconds",
            "retry_initial_seconds",
            "retry_max_seconds",
            "metrics_interval_seconds",
            "standby_retry_seconds",
            "pass_seconds",
        ):
            value = getattr(self, name)
            if not 0 < value <= 3_600:
                raise ValueError(f"{name} must be in (0, 3600], got {value}")
        if self.retry_max_seconds < self.retry_initial_seconds:
            raise ValueError("retry_max_seconds must be >= retry_initial_seconds")


@dataclass(frozen=True)
class OutboxLag:
    unsent: int
    oldest_unsent_age_seconds: float


class _Leadership:
    """Who may relay. PostgreSQL: the holder of the advisory lock, working on the lock's own
    connection. Other dialects (SQLite): always this process, one short transaction per step."""

    def __init__(self, engine: AsyncEngine, lock_key: int) -> None:
        self._engine = engine
        self._lock_key = lock_key
        self._exclusive = engine.dialect.name == "postgresql"
        self._conn: AsyncConnection | None = None

    @property
    def held(self) -> bool:
        return not self._exclusive or self._conn is not None

    async def acquire(self) -> bool:
        if self.held:
            return True
        conn = await self._engine.connect()
        try:
            got = await conn.scalar(sa.select(sa.func.pg_try_advisory_lock(self._lock_key)))
            await conn.commit()
        except BaseException:
            await _discard(conn)
            raise
        if not got:
            await conn.close()
            return False
        self._conn = conn
        log.info("outbox relay: this process is now the active relay")
        return True

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        if not self._exclusive:
            async with self._engine.begin() as conn:
                yield conn
            return
        if self._conn is None:
            raise RuntimeError("outbox relay step without leadership")
        async with self._conn.begin():
            yield self._conn

    async def release(self, *, clean: bool) -> None:
        """Give up the lock. `clean=False` (after an error) closes the connection for good, so
        the server drops the lock even if the connection is in an unknown state."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if not clean:
            await _discard(conn)
            return
        try:
            await conn.execute(sa.select(sa.func.pg_advisory_unlock(self._lock_key)))
            await conn.commit()
            await conn.close()
        except Exception:
            await _discard(conn)


async def _discard(conn: AsyncConnection) -> None:
    """Close the underlying DBAPI connection instead of returning it (and any session lock on
    it) to the pool."""
    try:
        await conn.invalidate()
    except Exception:  # already broken: nothing more to release
        log.debug("invalidate failed", exc_info=True)
    try:
        await conn.close()
    except Exception:
        log.debug("close failed", exc_info=True)


class OutboxRelay:
    """Publishes the outbox to `publisher`. `run()` loops until stopped or cancelled; the
    single-step methods (`relay_batch`, `drain`, `refresh_metrics`) are what it calls, and tests
    call them directly. The publisher's start/stop belongs to the caller (it is shared with the
    event action)."""

    def __init__(
        self,
        engine: AsyncEngine,
        publisher: Publisher,
        *,
        clock: Clock,
        config: RelayConfig | None = None,
        registry: CollectorRegistry | None = None,
        rng: random.Random | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._monotonic = monotonic
        self._publisher = publisher
        self._clock = clock
        self.config = config or RelayConfig()
        self.metrics = RelayMetrics.for_registry(registry)
        self._rng = rng or random.Random()
        self._leadership = _Leadership(engine, self.config.lock_key)
        self._wake = asyncio.Event()
        self._last_metrics: float | None = None
        # A pass of the loop drains at most this many batches (and for at most `pass_seconds`),
        # then refreshes metrics if due (so a long backlog does not starve them).
        self._batches_per_pass = 100
        self.loop = WorkerLoop(
            "outbox relay",
            self.step,
            idle_seconds=self.config.poll_interval_seconds,
            backoff_initial_seconds=self.config.retry_initial_seconds,
            backoff_max_seconds=self.config.retry_max_seconds,
            jitter=self._rng,
            outage="bus or database unavailable",
            logger=log,
            wake=self._wake,
        )

    # -- public API ---------------------------------------------------------------------------

    def wake(self) -> None:
        """Ask an idle relay to look now (e.g. after a commit that wrote outbox rows)."""
        self._wake.set()

    @property
    def is_leader(self) -> bool:
        """True while this relay may publish (always on SQLite)."""
        return self._leadership.held

    async def acquire_leadership(self) -> bool:
        """True when this relay may publish (always on SQLite)."""
        held = await self._leadership.acquire()
        self.metrics.leader.set(1 if held else 0)
        return held

    async def release_leadership(self) -> None:
        await self._leadership.release(clean=True)
        self.metrics.leader.set(0)

    async def relay_batch(self) -> int:
        """One step: publish up to `batch_size` unsent rows and mark them sent; return how many
        rows were handled (0: nothing to do, or not the leader). Raises PublishError (nothing
        marked) when the bus does not acknowledge."""
        if not await self.acquire_leadership():
            return 0
        rows = await self._read_unsent(after_id=None)
        if rows:
            await self._publish(rows)
            await self._mark_sent([row.id for row in rows])
        return len(rows)

    async def drain(self, *, max_batches: int = 1_000, seconds: float | None = None) -> int:
        """Relay until a read finds less than a full batch, or `max_batches` were read, or
        `seconds` have passed (no further batch is read then); return how many rows were
        handled."""
        total, _ = await self._drain(max_batches, seconds)
        return total

    async def _drain(self, max_batches: int, seconds: float | None) -> tuple[int, bool]:
        """`drain`, and whether it stopped after a full batch (more may be waiting).

        Pipelined: while batch k is being marked sent (on a pooled connection), batch k+1 is
        read and published; a batch is published only after the previous one was acknowledged,
        so the order per key holds. Rows of batch k are excluded from the next read by id
        (`id > last id of k`); a lower id that commits late is found by the next drain, which
        starts from the lowest unsent id again."""
        if not await self.acquire_leadership():
            return 0, False
        deadline = None if seconds is None else self._monotonic() + seconds
        total = 0
        full = False
        marking: asyncio.Task[None] | None = None
        prefetch: asyncio.Task[Sequence[Any]] | None = None
        try:
            rows = await self._read_unsent(after_id=None)
            for batch_number in range(1, max_batches + 1):
                if not rows:
                    full = False
                    break
                full = len(rows) == self.config.batch_size
                in_time = deadline is None or self._monotonic() < deadline
                if full and batch_number < max_batches and in_time:
                    prefetch = asyncio.create_task(self._read_unsent(after_id=rows[-1].id))
                await self._publish(rows)
                if marking is not None:
                    await marking  # at most one mark in flight; its failure stops the drain
                marking = asyncio.create_task(self._mark_sent([row.id for row in rows]))
                total += len(rows)
                if prefetch is None:
                    break
                rows, prefetch = await prefetch, None
            if marking is not None:
                await marking
                marking = None
        except BaseException as exc:
            if prefetch is not None and not prefetch.done():
                prefetch.cancel()
            if marking is not None and not marking.done() and isinstance(exc, Exception):
                # The batch being marked was acknowledged: finish marking it, or it would be
                # published again. (On cancel it is abandoned: a republish, never a loss.)
                await asyncio.gather(marking, return_exceptions=True)
            for task in (prefetch, marking):
                if task is not None and not task.done():
                    task.cancel()
            # Collect every task's outcome so none is reported as "never retrieved".
            await asyncio.gather(
                *(t for t in (prefetch, marking) if t is not None), return_exceptions=True
            )
            raise
        return total, full

    async def _read_unsent(self, *, after_id: int | None) -> Sequence[Any]:
        query = (
            sa.select(
                outbox.c.id, outbox.c.event_id, outbox.c.topic, outbox.c.key, outbox.c.payload
            )
            .where(outbox.c.sent_at.is_(None))
            .order_by(outbox.c.id)
            .limit(self.config.batch_size)
        )
        if after_id is not None:
            query = query.where(outbox.c.id > after_id)
        async with self._leadership.transaction() as conn:
            rows: Sequence[Any] = (await conn.execute(query)).all()
            return rows

    async def _publish(self, rows: Sequence[Any]) -> None:
        messages: list[Message] = []
        for row in rows:
            value = row.payload.encode("utf-8")
            if len(value) > MAX_MESSAGE_BYTES:
                # The bus would refuse it forever and block every later event: set it aside.
                log.error(
                    "outbox event %s is %d bytes, over the bus limit of %d; not published",
                    row.event_id,
                    len(value),
                    MAX_MESSAGE_BYTES,
                )
                self.metrics.rejected.inc()
                continue
            messages.append(Message(topic=row.topic, key=row.key, value=value))
        try:
            await self._publisher.publish(messages)
        except PublishError:
            self.metrics.publish_failures.inc()
            raise
        self.metrics.published.inc(len(messages))

    async def _mark_sent(self, ids: Sequence[int]) -> None:
        # A pooled connection, not the lock's: marking what was acknowledged is harmless even
        # for a relay that just lost the lock, and it lets the next batch be read meanwhile.
        now = self._clock()
        async with self._engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # One array parameter: the statement is compiled and prepared once, where an
                # expanding IN renders (and PostgreSQL plans) a new statement per batch size.
                # A mark lost in a server crash only republishes those rows (at-least-once,
                # consumers deduplicate by event id): no need to wait for its WAL flush.
                await conn.execute(_ASYNC_COMMIT)
                await conn.execute(_MARK_SENT_PG, {"ids": list(ids), "now": now})
            else:
                stmt = sa.update(outbox).where(outbox.c.id.in_(ids)).values(sent_at=now)
                await conn.execute(stmt)

    async def refresh_metrics(self) -> OutboxLag:
        """Recompute the lag gauges from the database (any replica may do this)."""
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(sa.func.count(), sa.func.min(outbox.c.created_at)).where(
                        outbox.c.sent_at.is_(None)
                    )
                )
            ).one()
        unsent = int(row[0])
        oldest: datetime | None = row[1]
        age = max(0.0, (self._clock() - oldest).total_seconds()) if oldest is not None else 0.0
        self.metrics.unsent.set(unsent)
        self.metrics.oldest_unsent_age.set(age)
        return OutboxLag(unsent=unsent, oldest_unsent_age_seconds=age)

    def stop(self) -> None:
        """End `run()` after the current step (cancelling it works too)."""
        self.loop.stop()

    async def run(self) -> None:
        """Relay until stopped or cancelled (servicekit `WorkerLoop`): publish while there is
        work, wait for `wake()` or the poll interval when idle, back off (with jitter) after
        failures, refresh metrics periodically."""
        try:
            await self.loop.run()
        finally:
            await asyncio.shield(self.release_leadership())

    async def step(self) -> float | None:
        """One pass: the leader drains up to `_batches_per_pass` batches, for at most
        `pass_seconds`; a standby looks again after `standby_retry_seconds`. Returns 0 while a
        backlog remains."""
        try:
            if not await self.acquire_leadership():
                await self._periodic_metrics()
                return self.config.standby_retry_seconds
            _, more = await self._drain(self._batches_per_pass, self.config.pass_seconds)
            await self._periodic_metrics()
        except PublishError:
            # The lag gauges matter most during an outage: keep them current.
            await self._periodic_metrics_quietly()
            raise
        except Exception:
            # A database error or a bug: give up the lock's connection (it may be broken), so
            # the next step starts from a fresh one; the loop logs and backs off.
            await self._leadership.release(clean=False)
            self.metrics.leader.set(0)
            raise
        return 0.0 if more else None

    # -- loop helpers ---------------------------------------------------------------------------

    async def _periodic_metrics_quietly(self) -> None:
        try:
            await self._periodic_metrics()
        except Exception:
            log.warning("outbox relay: could not refresh lag metrics", exc_info=True)

    async def _periodic_metrics(self) -> None:
        now = asyncio.get_running_loop().time()
        due = self.config.metrics_interval_seconds
        if self._last_metrics is None or now - self._last_metrics >= due:
            self._last_metrics = now
            await self.refresh_metrics()
