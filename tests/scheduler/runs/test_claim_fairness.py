"""Claim order and the hot-path settle shortcuts, against real databases: tenants take turns in a
claim, concurrent claimers never share a run, the breaker count resets without reading schedules
when every run of a group succeeded (and still trips in order when one failed)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.claiming import tenant_round_robin
from scheduler.domain.run import AttemptOutcome, Run, Trigger
from scheduler.service_layer.settle import Completion, settle_completions
from tests.scheduler.runs.conftest import T0, add_schedule
from tests.scheduler.runs.dispatch_helpers import claim_runs, schedule_row

LEASE = timedelta(seconds=30)


def _run(tenant: str, schedule_id: str, n: int, due_offset_s: float = 0.0) -> Run:
    due = T0 + timedelta(seconds=due_offset_s)
    return Run.planned(
        tenant_id=tenant,
        schedule_id=schedule_id,
        scheduled_for=due,
        now=T0 - timedelta(minutes=1),
        trigger=Trigger.MANUAL,
        run_id=f"run_{tenant}_{n:04d}",
    )


async def _insert(uows: SqlUnitOfWorkFactory, runs: list[Run]) -> None:
    async with uows() as uow:
        assert await uow.runs.insert_runs(runs) == len(runs)
        await uow.commit()


async def test_a_burst_of_one_tenant_does_not_go_before_another_tenant(
    uows: SqlUnitOfWorkFactory,
) -> None:
    # Tenant "big" planned 40 runs before tenant "small" planned 3, all due at the same instant
    # (and big's even a little earlier): the first claim of 6 takes turns, 3 each.
    big = [_run("big", "sch_big", i, due_offset_s=-1) for i in range(40)]
    small = [_run("small", "sch_small", i) for i in range(3)]
    await _insert(uows, big)
    await _insert(uows, small)
    now = T0 + timedelta(seconds=1)
    async with uows() as uow:
        claimed = await claim_runs(uow.runs, "w:1", now, now + LEASE, 6)
        await uow.commit()
    by_tenant = sorted(r.tenant_id for r in claimed)
    assert by_tenant == ["big"] * 3 + ["small"] * 3
    # Within a tenant, oldest first: big's first three by id (same due time).
    assert sorted(r.id for r in claimed if r.tenant_id == "big") == [r.id for r in big[:3]]


async def test_attempts_start_one_tenant_at_a_time_in_turn() -> None:
    runs = [_run("a", "s", i) for i in range(3)] + [_run("b", "s", i) for i in range(2)]
    ordered = tenant_round_robin(list(reversed(runs)))
    assert [r.tenant_id for r in ordered] == ["a", "b", "a", "b", "a"]
    assert [r.id for r in ordered if r.tenant_id == "a"] == [r.id for r in runs[:3]]


@pytest.mark.postgres
async def test_concurrent_claimers_share_the_due_runs_without_overlap(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    if container.engine.dialect.name != "postgresql":
        pytest.skip("concurrent transactions: PostgreSQL (SQLite has one writer)")
    await _insert(uows, [_run(f"t{i % 3}", "sch_x", i) for i in range(30)])
    now = T0 + timedelta(seconds=1)
    async with uows() as first, uows() as second:
        # The first claimer's fair choice is locked (uncommitted) while the second claims: the
        # second skips it and still gets a full batch from the rest.
        a = await claim_runs(first.runs, "w:a", now, now + LEASE, 10)
        b = await claim_runs(second.runs, "w:b", now, now + LEASE, 10)
        await first.commit()
        await second.commit()
    assert (len(a), len(b)) == (10, 10)
    assert not {r.id for r in a} & {r.id for r in b}


def _outcome(ok: bool) -> AttemptOutcome:
    if ok:
        return AttemptOutcome(ok=True, started_at=T0, duration_ms=1, status_code=200)
    return AttemptOutcome(
        ok=False, started_at=T0, duration_ms=1, status_code=400, error_kind="http_status"
    )


async def _finish(uows: SqlUnitOfWorkFactory, runs: list[Run], oks: list[bool]) -> None:
    assert len(runs) == len(oks)
    at = T0 + timedelta(seconds=1)
    async with uows() as uow:
        claimed = {r.id: r for r in await claim_runs(uow.runs, "w:s", at, at + LEASE, len(runs))}
        await uow.commit()
    completions = []
    for run, ok in zip(runs, oks, strict=True):
        held = claimed[run.id]
        held.record_attempt("w:s", _outcome(ok), at, None)
        completions.append(Completion.of(held, "w:s"))
    report = await settle_completions(uows, completions, at)
    assert len(report.settled) == len(runs)


async def test_breaker_resets_on_success_and_trips_in_completion_order(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    flaky = await add_schedule(container, "http://127.0.0.1:9/x", name="flaky", threshold=2)
    steady = await add_schedule(container, "http://127.0.0.1:9/x", name="steady", threshold=2)
    # Group 1: flaky fails once; steady succeeds (its count stays 0, its row untouched).
    r1 = [_run("tenant-a", flaky.id, 1), _run("tenant-a", steady.id, 2)]
    await _insert(uows, r1)
    before = await schedule_row(container, steady.id)
    await _finish(uows, r1, [False, True])
    assert (await schedule_row(container, flaky.id)).consecutive_failures == 1
    after = await schedule_row(container, steady.id)
    assert (after.consecutive_failures, after.version, after.updated_at) == (
        0,
        before.version,
        before.updated_at,
    )
    # Group 2: flaky succeeds alone -> back to 0 through the conditional reset.
    r2 = [_run("tenant-a", flaky.id, 3)]
    await _insert(uows, r2)
    await _finish(uows, r2, [True])
    assert (await schedule_row(container, flaky.id)).consecutive_failures == 0
    # Group 3: fail, succeed, fail, fail for flaky in one group: applied in order, so the count
    # goes 1, 0, 1, 2 and the breaker trips at the last one (threshold 2).
    r3 = [_run("tenant-a", flaky.id, n) for n in (4, 5, 6, 7)]
    await _insert(uows, r3)
    await _finish(uows, r3, [False, True, False, False])
    row = await schedule_row(container, flaky.id)
    assert (row.consecutive_failures, row.state, row.paused_reason) == (2, "paused", "breaker")
