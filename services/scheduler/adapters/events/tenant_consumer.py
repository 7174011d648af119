"""The tenant-state consumer: platform-events and billing-entitlements into the projections,
and from destination-events the holds notification's deliveries met.

Each step is eventbus's `BatchConsumer`: poll a batch (at most `max_batch` records), decode,
apply the whole batch in ONE transaction (service_layer.tenant_events.apply_events: deduplicated
by event id in the same transaction), THEN commit the offsets. A crash between the two
redelivers the batch, which the dedup table turns into no-ops. A database error retries the SAME
batch with the worker loop's backoff. A record that is not an envelope is logged and skipped.
The dedup table is pruned by the retention worker only
(SCHEDULER_PROCESSED_EVENTS_RETENTION_DAYS).

    worker = make_tenant_consumer(container)   # scheduler.bootstrap
    task = asyncio.create_task(worker.run()); ...; worker.stop()
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from eventbus import BatchConsumer, Consumer, decode
from scheduler.adapters.db.tenant_store import TenantProjectionCache
from scheduler.domain.events import DESTINATION_EVENTS_TOPIC
from scheduler.domain.tenant import (
    BILLING_ENTITLEMENTS_TOPIC,
    PLATFORM_EVENTS_TOPIC,
    Entitlements,
)
from scheduler.domain.versions import Actor, Source
from scheduler.service_layer.tenant_events import BatchReport, apply_events
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from servicekit.runtime.worker import WorkerLoop

log = logging.getLogger("scheduler.tenant_consumer")

# destination-events: the holds notification's deliveries met (apply_events).
TOPICS = (PLATFORM_EVENTS_TOPIC, BILLING_ENTITLEMENTS_TOPIC, DESTINATION_EVENTS_TOPIC)
GROUP_ID = "scheduler-tenant-state"
MAX_BATCH = 200  # records per transaction: bounds lock time when a downgrade pauses schedules


class TenantConsumerWorker:
    def __init__(
        self,
        consumer: Consumer,
        uow_factory: UnitOfWorkFactory,
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
        # Stopped with a batch unapplied, the loop leaves its offsets uncommitted.
        self.consuming: BatchConsumer[dict[str, Any]] = BatchConsumer(
            consumer,
            parse=lambda record: decode(record.value),
            handle=self.apply,
            name="tenant consumer",
            max_records=max_batch,
            poll_seconds=poll_seconds,
            logger=log,
        )
        self.loop = WorkerLoop(
            "tenant consumer",
            self.consuming.step,
            idle_seconds=0.0,  # the poll waits up to poll_seconds for the first record
            backoff_initial_seconds=retry_initial_seconds,
            backoff_max_seconds=retry_max_seconds,
            outage="bus or database unavailable",
            logger=log,
        )

    def stop(self) -> None:
        self.loop.stop()

    async def run(self) -> None:
        await self.consumer.start()
        try:
            await self.loop.run()
        finally:
            await self.consumer.stop()

    async def apply(self, events: Sequence[dict[str, Any]]) -> None:
        """Apply one batch of envelopes in one transaction (raises: the batch is retried)."""
        # Of tenant events, only a downgrade changes schedules (it pauses them): the quota's.
        uow = self.uow_factory(Actor.system(Source.QUOTA))
        report = await apply_events(uow, events, self.clock(), self.defaults)
        if self.on_batch is not None:
            self.on_batch(report)
        if self.cache is not None:
            with contextlib.suppress(Exception):
                await self.cache.refresh()
