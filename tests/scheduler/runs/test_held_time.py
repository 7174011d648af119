"""A run kept back by flow control does not spend its retry budget (DESIGN.md §7b: a held run
does not count toward max_retry_duration_seconds): the seconds a hold or a deferral keeps an
attempted run back add up in `runs.held_seconds` (migration 0020), and the retry decision
leaves them out. A first attempt kept back gains none: its duration has not started (its
`started_at` stays unset). SQLite and PostgreSQL, through the repository's own statements."""

from __future__ import annotations

import random
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.runs.rows import row_to_run
from scheduler.adapters.db.tables import runs
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.policies import RetryPolicy
from scheduler.domain.run import AttemptOutcome, Run
from scheduler.service_layer.dispatch_service import retry_delay
from scheduler.service_layer.flow_ports import Deferral
from scheduler.service_layer.planning_service import plan_due
from tests.scheduler.runs.conftest import ManualClock, add_schedule
from tests.scheduler.runs.dispatch_helpers import PLAN

KEY = ("tenant-a", "hooks.example.com:80")


async def run_row(container: Container, run_id: str) -> Run:
    async with container.engine.connect() as conn:
        row = (await conn.execute(sa.select(runs).where(runs.c.id == run_id))).one()
    return row_to_run(row)


async def set_run(container: Container, run_id: str, **values: Any) -> None:
    async with container.engine.begin() as conn:
        await conn.execute(sa.update(runs).where(runs.c.id == run_id).values(**values))


def failed_at(at: Any) -> AttemptOutcome:
    return AttemptOutcome(
        ok=False,
        started_at=at,
        duration_ms=5,
        status_code=500,
        error_kind="http_status",
        retryable=True,
    )


async def test_time_kept_back_is_not_spent_from_the_retry_budget(
    container: Container, uows: SqlUnitOfWorkFactory, mclock: ManualClock
) -> None:
    first = await add_schedule(container, "http://hooks.example.com/in", name="a")
    await add_schedule(container, "http://hooks.example.com/in", name="b")
    assert first.next_run_at is not None
    mclock.set(first.next_run_at)
    await plan_due(uows, now=mclock(), settings=PLAN)
    async with container.engine.connect() as conn:
        ids = [r.id for r in await conn.execute(sa.select(runs.c.id).order_by(runs.c.id))]
    attempted, fresh = ids
    now = mclock()
    # One run failed an attempt 50 s ago and is due again now; the other never went out.
    await set_run(
        container,
        attempted,
        status="retrying",
        attempt_count=1,
        started_at=now - timedelta(seconds=50),
        next_attempt_at=now,
    )

    # A hold of 90 s: the attempted run is kept back 90 s, the fresh one gains nothing.
    until = now + timedelta(seconds=90)
    async with uows() as uow:
        assert await uow.destinations.hold_pending(KEY, until, now) == 2
        await uow.commit()
    a, f = await run_row(container, attempted), await run_row(container, fresh)
    assert (a.next_attempt_at, f.next_attempt_at) == (until, until)
    assert a.held_seconds == pytest.approx(90)
    assert (f.held_seconds, f.started_at) == (0.0, None)

    # Claimed at the hold's end, then deferred 5 s for a token: 5 s more for the attempted run.
    mclock.set(until)
    for run_id, started in ((attempted, now - timedelta(seconds=50)), (fresh, until)):
        await set_run(container, run_id, status="in_progress", lease_owner="w1", started_at=started)
    async with uows() as uow:
        await uow.destinations.defer_runs(
            [
                Deferral(attempted, "w1", until + timedelta(seconds=5), 5.0),
                Deferral(fresh, "w1", until + timedelta(seconds=5), 5.0),
            ]
        )
        await uow.commit()
    a, f = await run_row(container, attempted), await run_row(container, fresh)
    assert (a.status.value, a.held_seconds) == ("pending", pytest.approx(95))
    assert a.started_at == now - timedelta(seconds=50)  # its first attempt's start, kept
    assert (f.status.value, f.held_seconds, f.started_at) == ("pending", 0.0, None)

    # It fails again when the deferral ends, 145 s after its first attempt: 95 s of them held.
    # With a budget of 100 s and a 10 s backoff it is retried; counting the held time it
    # would give up.
    policy = RetryPolicy(
        max_attempts=10,
        initial_backoff_seconds=10.0,
        max_backoff_seconds=10.0,
        multiplier=1.0,
        max_retry_duration_seconds=100.0,
    )
    spec: Any = SimpleNamespace(retry_policy=policy)
    at = until + timedelta(seconds=5)
    rng = random.Random(1)
    assert retry_delay(a, spec, failed_at(at), at, rng) is not None
    a.held_seconds = 0.0
    assert retry_delay(a, spec, failed_at(at), at, rng) is None
