"""The tenant-state consumer: platform-events and billing-entitlements into the projections.

Loop: poll a batch (at most `max_batch` records), decode, apply the whole batch in ONE
transaction (service_layer.tenant_state.apply_events: deduplicated by event id in the same
transaction), THEN commit the offsets. A crash between the two redelivers the batch, which the
dedup table turns into no-ops. A database error retries the SAME batch with bounded backoff
(polling on would commit offsets past events never applied). A record that is not an envelope is
logged and skipped. Once a day of processing time the dedup table is pruned.

    worker = TenantConsumerWorker.from_container(container, bus=in_process_bus)
    task = asyncio.create_task(worker.run()); ...; worker.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from eventbus import ConsumeError, Consumer, EnvelopeError, InProcessBus, Record, decode
from eventbus import make_consumer as make_bus_consumer
from scheduler.adapters.db.tenant_store import (
    PROCESSED_RETENTION,
    SqlTenantUnitOfWorkFactory,
    TenantProjectionCache,
)
from scheduler.bootstrap import Container
from scheduler.domain.tenant import (
    BILLING_ENTITLEMENTS_TOPIC,
    PLATFORM_EVENTS_TOPIC,
    Entitlements,
)
from scheduler.service_layer.tenant_state import BatchReport, apply_events

log = logging.getLogger("scheduler.tenant_consumer")

TOPICS = (PLATFORM_EVENTS_TOPIC, BILLING_ENTITLEMENTS_TOPIC)
GROUP_ID = "scheduler-tenant-state"
MAX_BATCH = 200  # records per transaction: bounds lock time when a downgrade pauses schedules
PRUNE_EVERY = timedelta(hours=1)
PRUNE_LIMIT = 10_000  # ids forgotten per prune: bounded delete


def defaults_from(container: Container) -> Entitlements:
    """The configured limits of tenants without an entitlements event (the cache's)."""
    return container.tenants.defaults


def decode_records(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Envelopes of a batch in log order; a malformed record is logged and dropped."""
    out: list[dict[str, Any]] = []
    for record in records:
        try:
            out.append(decode(record.value))
        except EnvelopeError as exc:
            log.warning(
                "skipping malformed record %s[%d]@%d: %s",
                record.topic,
                record.partition,
                record.offset,
                exc,
            )
    return out


class TenantConsumerWorker:
    def __init__(
        self,
        consumer: Consumer,
        uow_factory: SqlTenantUnitOfWorkFactory,
        clock: Callable[[], datetime],
        *,
        defaults: Entitlements,
        cache: TenantProjectionCache | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        max_batch: int = MAX_BATCH,
        poll_seconds: float = 1.0,
        retry_initial_seconds: float = 0.2,
        retry_max_seconds: float = 5.0,
    ) -> None:
        if not 1 <= max_batch <= 10_000:
            raise ValueError("max_batch must be between 1 and 10000")
        self.consumer = consumer
        self.uow_factory = uow_factory
        self.clock = clock
        self.defaults = defaults
        self.cache = cache
        self.on_batch = on_batch
        self.max_batch = max_batch
        self.poll_seconds = poll_seconds
        self.retry_initial = retry_initial_seconds
        self.retry_max = retry_max_seconds
        self._stop = asyncio.Event()
        self._last_prune: datetime | None = None

    @classmethod
    def from_container(
        cls,
        container: Container,
        *,
        bus: InProcessBus | None = None,
        cache: TenantProjectionCache | None = None,
        **kwargs: Any,
    ) -> TenantConsumerWorker:
        consumer = make_bus_consumer(
            container.settings.kafka_bootstrap_servers,
            bus,
            TOPICS,
            GROUP_ID,
            client_id="scheduler-tenant-state",
        )
        return cls(
            consumer,
            container.uow_factory,
            container.clock,
            defaults=defaults_from(container),
            cache=cache,
            **kwargs,
        )

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        await self.consumer.start()
        try:
            while not self._stop.is_set():
                try:
                    records = await self.consumer.poll(
                        max_records=self.max_batch, timeout_seconds=self.poll_seconds
                    )
                except ConsumeError as exc:
                    log.warning("tenant consumer: poll failed (%s); retrying", exc)
                    await self._sleep(self.retry_max)
                    continue
                if not records:
                    continue
                if not await self._apply_until_done(decode_records(records)):
                    return  # stopped before the batch was applied: leave it uncommitted
                await self._commit_offsets()
                await self._after_batch()
        finally:
            await self.consumer.stop()

    async def _apply_until_done(self, events: list[dict[str, Any]]) -> bool:
        delay = self.retry_initial
        while not self._stop.is_set():
            try:
                report = await apply_events(self.uow_factory(), events, self.clock(), self.defaults)
            except Exception as exc:  # database down, a concurrent edit: the same batch again
                log.warning("tenant consumer: applying a batch failed (%r); retrying", exc)
                await self._sleep(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            if self.on_batch is not None:
                self.on_batch(report)
            return True
        return False

    async def _commit_offsets(self) -> None:
        try:
            await self.consumer.commit()
        except ConsumeError as exc:
            # Harmless: the batch is redelivered and deduplicated.
            log.warning("tenant consumer: offset commit failed (%s)", exc)

    async def _after_batch(self) -> None:
        if self.cache is not None:
            with contextlib.suppress(Exception):
                await self.cache.refresh()
        now = self.clock()
        if self._last_prune is None or now - self._last_prune >= PRUNE_EVERY:
            self._last_prune = now
            try:
                async with self.uow_factory() as uow:
                    await uow.tenants.prune_processed(now - PROCESSED_RETENTION, PRUNE_LIMIT)
                    await uow.commit()
            except Exception as exc:
                log.warning("tenant consumer: pruning processed ids failed (%r)", exc)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
