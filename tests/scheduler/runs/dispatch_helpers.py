"""Drive a RunDispatcher step by step with a manual clock (no sleeping for time)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from scheduler.adapters.actions import ActionRouter, WebhookAction
from scheduler.adapters.db.tables import delivery_attempts, outbox, runs, schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.run import Run
from scheduler.domain.schedule import Schedule
from scheduler.service_layer.dispatch_service import DispatchSettings, RunDispatcher
from scheduler.service_layer.event_action import PublishingEventAction
from scheduler.service_layer.planning_service import PlanningSettings, plan_due
from scheduler.service_layer.run_ports import RunRepository
from tests.scheduler.runs.conftest import ManualClock
from webhookdeliver import Deliverer

PLAN = PlanningSettings(lookahead=timedelta(seconds=10))


async def plan_at_occurrence(uows: SqlUnitOfWorkFactory, mclock: ManualClock, s: Schedule) -> None:
    """Move the clock to the schedule's next occurrence and plan it (due now)."""
    assert s.next_run_at is not None
    mclock.set(s.next_run_at)
    await plan_due(uows, now=mclock(), settings=PLAN)


async def claim_runs(
    repo: RunRepository, owner: str, now: datetime, lease_until: datetime, limit: int
) -> list[Run]:
    """The runs a dispatcher's claim hands `owner` (without their delivery specs)."""
    return (await repo.claim_due_runs(owner, now, lease_until, limit)).runs


def make_dispatcher(
    container: Container,
    uows: SqlUnitOfWorkFactory,
    deliverer: Deliverer,
    **settings: Any,
) -> RunDispatcher:
    import random

    # per_key_limit is a destination's default in-flight limit (flow control, each worker's own
    # slots while the destination has no row):
    # every test's runs share one loopback receiver, so the tests of other rules lift it.
    settings.setdefault("per_key_limit", 100)
    return RunDispatcher(
        uows,
        ActionRouter(
            WebhookAction(deliverer, container.clock),
            PublishingEventAction(container.publisher, container.clock),
        ),
        container.clock,
        settings=DispatchSettings(**settings),
        worker_id="test-worker",
        rng=random.Random(7),
    )


async def step(d: RunDispatcher) -> int:
    """Claim what is due now, finish every attempt, write every result."""
    claimed, _ = await d.pipeline.pump()
    await d.pipeline.drain()
    return claimed


async def rows(container: Container, table: sa.Table, *where: Any) -> list[sa.Row]:
    async with container.engine.connect() as conn:
        q = sa.select(table)
        for w in where:
            q = q.where(w)
        return list(await conn.execute(q))


async def run_rows(container: Container) -> list[sa.Row]:
    async with container.engine.connect() as conn:
        return list(await conn.execute(sa.select(runs).order_by(runs.c.scheduled_for)))


async def attempt_rows(container: Container, run_id: str) -> list[sa.Row]:
    return sorted(
        await rows(container, delivery_attempts, delivery_attempts.c.run_id == run_id),
        key=lambda r: r.number,
    )


async def outbox_types(container: Container) -> list[str]:
    async with container.engine.connect() as conn:
        return [r[0] for r in await conn.execute(sa.select(outbox.c.type).order_by(outbox.c.id))]


async def schedule_row(container: Container, schedule_id: str) -> sa.Row:
    (row,) = await rows(container, schedules, schedules.c.id == schedule_id)
    return row
