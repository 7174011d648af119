"""The planner loop: plan due schedules, wake the dispatcher, sleep until the next one is due.

Sleeps until the earliest `next_run_at - lookahead` or `poll_seconds` at most (schedules created
or resumed by other processes), never longer; a full batch or a schedule with more occurrences
due plans again at once. The loop is servicekit's `WorkerLoop`: database errors back off
exponentially (bounded) and retry, occurrences missed meanwhile are planned on recovery under
each schedule's misfire_policy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from scheduler.service_layer.planning_service import (
    PlanningSettings,
    next_planning_at,
    plan_due,
)
from scheduler.service_layer.run_ports import TenantStatus
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from servicekit.runtime.worker import WorkerLoop

log = logging.getLogger("scheduler.planner")
MIN_IDLE_SECONDS = 0.05


class PlannerWorker:
    def __init__(
        self,
        uows: UnitOfWorkFactory,
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
        self.uows = uows
        self.clock = clock
        self.settings = settings or PlanningSettings()
        self.tenants = tenants
        self.on_planned = on_planned
        self.on_inserted = on_inserted
        self.poll_seconds = poll_seconds
        self.loop = WorkerLoop(
            "planner",
            self.step,
            idle_seconds=poll_seconds,
            backoff_initial_seconds=retry_initial_seconds,
            backoff_max_seconds=retry_max_seconds,
            outage="database unavailable",
            logger=log,
        )

    def stop(self) -> None:
        self.loop.stop()

    async def run(self) -> None:
        await self.loop.run()

    async def step(self) -> float | None:
        """One planning pass; returns the seconds until the next one is worth doing."""
        report = await plan_due(
            self.uows, now=self.clock(), settings=self.settings, tenants=self.tenants
        )
        if report.runs_inserted:
            if self.on_inserted is not None:
                self.on_inserted(report.runs_inserted)
            if self.on_planned is not None:
                self.on_planned()
        if report.more_due:
            return 0.0
        next_at = await next_planning_at(self.uows, self.settings.lookahead)
        wait = self.poll_seconds
        if next_at is not None:
            wait = min(wait, max((next_at - self.clock()).total_seconds(), 0.0))
        if report.schedules == 0:
            # Due but locked by another replica's pass: do not spin while it commits.
            wait = max(wait, MIN_IDLE_SECONDS)
        return wait
