"""WorkerRuntime: runs the workers of one process that `scheduler.bootstrap.build_workers` wires
from the Container — the planner, the dispatcher, and (`from_container`, i.e. `serve`) the
outbox relay, the tenant-state consumer, the retention worker and the ledger's missing check —
with graceful stop (SIGTERM: stop claiming, finish in-flight within the grace, release the rest)
and the queue-depth gauge.

The process's ONE publisher (`container.publisher`) is started before any worker and stopped
after all of them: the relay publishes the outbox with it and the event action publishes
`schedule.triggered` with it (a run succeeds when the bus acknowledges, DESIGN §6). The tenant
projection cache (`container.tenants`) is loaded before the planner's first pass and refreshed
meanwhile; the planner and the dispatcher judge suspension and quotas from it.

    runtime = WorkerRuntime.from_container(container)
    task = asyncio.create_task(runtime.run())
    ...
    await runtime.stop(grace_seconds=10)    # then `task` ends
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry

from scheduler.bootstrap import Container, WorkerOptions, build_workers
from scheduler.entrypoints.workers.metrics import WorkerMetrics
from scheduler.service_layer.run_ports import TenantStatus
from servicekit.runtime.watchdog import Watchdog
from servicekit.runtime.worker import WorkerGroup, WorkerLoop
from webhookdeliver import Deliverer

__all__ = ["WorkerOptions", "WorkerRuntime"]

log = logging.getLogger("scheduler.workers")
QUEUE_DEPTH_PERIOD_SECONDS = 5.0  # a count over the due index; not on the hot path
RESTART_DELAY_SECONDS = 5.0  # a worker that failed (e.g. Kafka unreachable) starts again after


class WorkerRuntime:
    def __init__(
        self,
        container: Container,
        *,
        options: WorkerOptions | None = None,
        registry: CollectorRegistry | None = None,
        deliverer: Deliverer | None = None,
        tenants: TenantStatus | None = None,
    ) -> None:
        self.container = container
        self.options = options or WorkerOptions()
        self.registry = registry or CollectorRegistry()
        self.metrics = WorkerMetrics(self.registry)
        self.uows = container.uow_factory
        workers = build_workers(
            container,
            self.options,
            observer=self.metrics,
            on_inserted=self.metrics.planned.inc,
            on_missing=self.metrics.ledger_missing.inc,
            on_timed_out=self.metrics.completion_timeouts.inc,
            registry=self.registry,
            deliverer=deliverer,
            tenants=tenants,
        )
        self.deliverer = workers.deliverer
        self.dispatcher = workers.dispatcher
        self.planner = workers.planner
        self.relay = workers.relay
        self.tenant_consumer = workers.tenant_consumer
        self.retention = workers.retention
        self.ledger_watch = workers.ledger_watch
        self.completion_watchdog = workers.completion_watchdog
        self.watchdog = Watchdog(
            step_timeout_seconds=container.settings.worker_step_timeout_seconds
        )
        """Every worker loop of this runtime (readyz: 503 while one is overdue)."""
        self._workers = self._group()

    @classmethod
    def from_container(
        cls,
        container: Container,
        *,
        registry: CollectorRegistry | None = None,
        tenants: TenantStatus | None = None,
    ) -> WorkerRuntime:
        options = WorkerOptions.serving(container.settings)
        return cls(container, options=options, registry=registry, tenants=tenants)

    def wake(self) -> None:
        self.dispatcher.pipeline.wake()

    def _group(self) -> WorkerGroup:
        """Entries with a stop hook end at stop(); the dispatcher drains within the grace; the
        relay and the queue-depth loop are side tasks, cancelled after the drain so that what
        the dispatcher settles meanwhile is still relayed."""
        group = WorkerGroup(
            restart_delay_seconds=RESTART_DELAY_SECONDS, logger=log, watchdog=self.watchdog
        )
        if self.options.planner:
            group.add("planner", self.planner.run, stop=self.planner.stop)
        if self.options.dispatcher:
            pipeline = self.dispatcher.pipeline
            group.add("dispatcher", pipeline.run, drain=pipeline.stop)
        depth = WorkerLoop(
            "queue-depth",
            self._count_due,
            idle_seconds=QUEUE_DEPTH_PERIOD_SECONDS,
            backoff_initial_seconds=QUEUE_DEPTH_PERIOD_SECONDS,
            backoff_max_seconds=QUEUE_DEPTH_PERIOD_SECONDS,
            logger=log,
        )
        group.add("queue-depth", depth.run)
        if self.relay is not None:
            group.add("outbox-relay", self.relay.run)
        if self.tenant_consumer is not None:
            # Its start can fail (Kafka unreachable): the group starts it again after a delay.
            group.add("tenant-consumer", self.tenant_consumer.run, stop=self.tenant_consumer.stop)
        if self.retention is not None:
            group.add("retention", self.retention.run, stop=self.retention.stop)
        if self.ledger_watch is not None:
            group.add("ledger-watch", self.ledger_watch.run, stop=self.ledger_watch.stop)
        if self.completion_watchdog is not None:
            group.add_loop(self.completion_watchdog.loop)
        return group

    async def run(self) -> None:
        publisher = self.container.publisher
        await publisher.start()  # before the dispatcher and the relay use it
        await self.container.start_tenants()  # before the planner's first pass
        try:
            await self._workers.run()
        finally:
            await self.container.stop_tenants()
            await publisher.stop()  # after every user of it

    async def stop(self, grace_seconds: float = 10.0) -> None:
        await self._workers.stop(grace_seconds)
        await self.deliverer.close()

    async def _count_due(self) -> float | None:
        async with self.uows() as uow:
            self.metrics.due.set(await uow.runs.count_due(self.container.clock()))
        return None
