"""WorkerRuntime: the planner and the dispatcher of one process, wired from the Container, with
graceful stop (SIGTERM: stop claiming, finish in-flight within the grace, release the rest) and
the queue-depth gauge.

    runtime = WorkerRuntime.from_container(container)
    task = asyncio.create_task(runtime.run())
    ...
    await runtime.stop(grace_seconds=10)    # then `task` ends
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from prometheus_client import CollectorRegistry

from scheduler.adapters.actions import ActionRouter, EventAction, WebhookAction
from scheduler.adapters.db.run_store import SqlRunStore
from scheduler.bootstrap import Container
from scheduler.entrypoints.workers.metrics import WorkerMetrics
from scheduler.entrypoints.workers.planner import PlannerWorker
from scheduler.service_layer.dispatch_service import Dispatcher, DispatchSettings, _is_transient
from scheduler.service_layer.planning_service import PlanningSettings
from scheduler.service_layer.run_ports import TenantStatus
from webhookdeliver import Deliverer

log = logging.getLogger("scheduler.workers")
QUEUE_DEPTH_PERIOD_SECONDS = 5.0  # a count over the due index; not on the hot path


@dataclass
class WorkerOptions:
    dispatch: DispatchSettings = field(default_factory=DispatchSettings)
    planning: PlanningSettings = field(default_factory=PlanningSettings)
    planner: bool = True
    dispatcher: bool = True
    planner_poll_seconds: float = 1.0


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
        self.store = SqlRunStore(container.engine, container.secret_box)
        d = self.options.dispatch
        self.deliverer = deliverer or Deliverer(
            allow_private_networks=container.settings.webhook_allow_private_networks,
            connector_limit=max(d.concurrency, 10),
            connector_limit_per_host=d.per_key_limit,
        )
        clock = container.clock
        self.dispatcher = Dispatcher(
            self.store,
            ActionRouter(WebhookAction(self.deliverer, clock), EventAction(clock)),
            clock,
            settings=d,
            tenants=tenants,
            observer=self.metrics,
        )
        self.planner = PlannerWorker(
            self.store,
            clock,
            settings=self.options.planning,
            tenants=tenants,
            on_planned=self.dispatcher.wake,
            on_inserted=self.metrics.planned.inc,
            poll_seconds=self.options.planner_poll_seconds,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()

    @classmethod
    def from_container(
        cls,
        container: Container,
        *,
        registry: CollectorRegistry | None = None,
        tenants: TenantStatus | None = None,
    ) -> WorkerRuntime:
        s = container.settings
        options = WorkerOptions(
            dispatch=DispatchSettings(concurrency=s.dispatch_concurrency),
            planning=PlanningSettings(lookahead=timedelta(seconds=s.planner_lookahead_seconds)),
        )
        return cls(container, options=options, registry=registry, tenants=tenants)

    def wake(self) -> None:
        self.dispatcher.wake()

    async def run(self) -> None:
        if self.options.planner:
            self._tasks.append(asyncio.create_task(self.planner.run(), name="planner"))
        if self.options.dispatcher:
            self._tasks.append(asyncio.create_task(self.dispatcher.run(), name="dispatcher"))
        self._tasks.append(asyncio.create_task(self._depth_loop(), name="queue-depth"))
        # Other workers from the composition root (e.g. the outbox relay): run until cancelled.
        for factory in self.container.workers:
            self._tasks.append(asyncio.create_task(factory(self.container).run(), name="worker"))
        try:
            await self._stopped.wait()
        finally:
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def stop(self, grace_seconds: float = 10.0) -> None:
        self.planner.stop()
        if self.options.dispatcher:
            await self.dispatcher.stop(grace_seconds)
        self._stopped.set()
        await self.deliverer.close()

    async def _depth_loop(self) -> None:
        while True:
            try:
                async with self.store.transaction() as tx:
                    self.metrics.due.set(await tx.count_due(self.container.clock()))
            except Exception as exc:
                if not _is_transient(exc):
                    raise
            await asyncio.sleep(QUEUE_DEPTH_PERIOD_SECONDS)
