"""The planner loop: plan due schedules, wake the dispatcher, sleep until the next one is due.

Sleeps until the earliest `next_run_at - lookahead` or `poll_seconds` at most (schedules created
or resumed by other processes), never longer; a full batch or a schedule with more occurrences
due plans again at once. Database errors back off exponentially (bounded) and retry: occurrences
missed meanwhile are planned on recovery under each schedule's misfire_policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime

from scheduler.service_layer.dispatch_service import _is_transient
from scheduler.service_layer.planning_service import (
    PlanningSettings,
    next_planning_at,
    plan_due,
)
from scheduler.service_layer.run_ports import RunStore, TenantStatus

log = logging.getLogger("scheduler.planner")
MIN_IDLE_SECONDS = 0.05


class PlannerWorker:
    def __init__(
        self,
        store: RunStore,
        clock: Callable[[], datetime],
        *,
        settings: PlanningSettings | None = None,
        tenants: TenantStatus | None = None,
        on_planned: Callable[[], None] | None = None,
        on_inserted: Callable[[int], None] | None = None,
        poll_seconds: float = 1.0,
        retry_initial_seconds: float = 0.2,
        retry_max_seconds: float = 5.0,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings or PlanningSettings()
        self.tenants = tenants
        self.on_planned = on_planned
        self.on_inserted = on_inserted
        self.poll_seconds = poll_seconds
        self.retry_initial = retry_initial_seconds
        self.retry_max = retry_max_seconds
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        delay = self.retry_initial
        while not self._stop.is_set():
            try:
                report = await plan_due(
                    self.store, now=self.clock(), settings=self.settings, tenants=self.tenants
                )
                if report.runs_inserted:
                    if self.on_inserted is not None:
                        self.on_inserted(report.runs_inserted)
                    if self.on_planned is not None:
                        self.on_planned()
                if report.more_due:
                    delay = self.retry_initial
                    continue
                next_at = await next_planning_at(self.store, self.settings.lookahead)
                delay = self.retry_initial
            except Exception as exc:
                if not _is_transient(exc):
                    raise
                log.warning("planner: database unavailable (%s); retrying", exc)
                await self._sleep(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            wait = self.poll_seconds
            if next_at is not None:
                wait = min(wait, max((next_at - self.clock()).total_seconds(), 0.0))
            if report.schedules == 0:
                # Due but locked by another replica's pass: do not spin while it commits.
                wait = max(wait, MIN_IDLE_SECONDS)
            await self._sleep(wait)

    async def _sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
