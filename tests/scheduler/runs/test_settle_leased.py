"""The settle write (`uow.runs.settle_leased`), against real databases: a compare-and-set on the
lease that writes run state, attempts and outbox rows for owned runs only, resets the breaker
count of all-succeeded schedules, and on PostgreSQL costs one statement per settle; and the
statements a PostgreSQL claim sends."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.runs import claims_pg
from scheduler.adapters.db.runs.settle import settle_params
from scheduler.adapters.db.runs.sql_postgres import WRITE_OWNED_SQL
from scheduler.adapters.db.tables import delivery_attempts, outbox, schedules
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.events import DomainEvent
from scheduler.domain.run import AttemptOutcome, Run, Trigger
from scheduler.service_layer.flow_ports import Deferral
from scheduler.service_layer.settle import Completion, settle_completions
from servicekit.data.database import CONFIGURED_PLANS_SQL, GENERIC_PLANS_SQL, asyncpg_connection
from tests.scheduler.runs.conftest import T0, add_schedule
from tests.scheduler.runs.dispatch_helpers import claim_runs, rows, run_rows, schedule_row
from tests.support.pg import explain_generic

LEASE = timedelta(seconds=30)
AT = T0 + timedelta(seconds=1)
OK = AttemptOutcome(ok=True, started_at=AT, duration_ms=3, status_code=200)
FAILED = AttemptOutcome(
    ok=False, started_at=AT, duration_ms=4, status_code=400, error_kind="http_status"
)


def _run(schedule_id: str, n: int) -> Run:
    return Run.planned(
        tenant_id="tenant-a",
        schedule_id=schedule_id,
        scheduled_for=T0,
        now=T0 - timedelta(minutes=1),
        trigger=Trigger.MANUAL,
        run_id=f"run_{schedule_id[-6:]}_{n:04d}",
    )


async def _claimed(
    uows: SqlUnitOfWorkFactory, runs: list[Run], owner: str = "w:1"
) -> dict[str, Run]:
    async with uows() as uow:
        assert await uow.runs.insert_runs(runs) == len(runs)
        got = {r.id: r for r in await claim_runs(uow.runs, owner, AT, AT + LEASE, len(runs))}
        await uow.commit()
    async with uows.engine.begin() as conn:  # set-up events (schedule.created): not ours
        await conn.execute(sa.delete(outbox))
    assert set(got) == {r.id for r in runs}
    return got


async def _set_failures(container: Container, schedule_id: str, count: int) -> None:
    async with container.engine.begin() as conn:
        await conn.execute(
            sa.update(schedules)
            .where(schedules.c.id == schedule_id)
            .values(consecutive_failures=count)
        )


def _introspection(sql: str) -> bool:
    """asyncpg's own queries about types, once per connection and type (and its JIT switch)."""
    return "pg_catalog" in sql or "current_setting('jit')" in sql or "set_config('jit'" in sql


@contextmanager
def _statements(container: Container) -> Iterator[list[str]]:
    """Every statement sent on a connection checked out while the block runs (SQL text, in
    order), BEGIN, COMMIT and ROLLBACK aside. PostgreSQL: as asyncpg sends them (the hot path
    goes to asyncpg directly, past SQLAlchemy's cursor events); SQLite: SQLAlchemy's cursor."""
    seen: list[str] = []
    engine = container.engine.sync_engine

    def record(*args: Any) -> None:
        seen.append(args[2])

    def logged(query: Any) -> None:
        head = query.query.split(None, 1)[0].rstrip(";").upper()
        if head not in ("BEGIN", "COMMIT", "ROLLBACK") and not _introspection(query.query):
            seen.append(query.query)

    def checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        dbapi_connection.driver_connection.add_query_logger(logged)

    def checkin(dbapi_connection: Any, _record: Any) -> None:
        if dbapi_connection is not None:
            dbapi_connection.driver_connection.remove_query_logger(logged)

    postgres = container.engine.dialect.name == "postgresql"
    hooks = [("checkout", checkout), ("checkin", checkin)] if postgres else []
    hooks = hooks or [("before_cursor_execute", record)]
    for name, hook in hooks:
        sa.event.listen(engine, name, hook)
    try:
        yield seen
    finally:
        for name, hook in hooks:
            sa.event.remove(engine, name, hook)


async def test_only_runs_still_leased_to_the_owner_are_written(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    mine, stolen, other = (_run(s.id, n) for n in (1, 2, 3))
    held = await _claimed(uows, [mine, stolen, other])
    # `stolen`'s lease passed to another worker (as after an expiry and a re-claim).
    async with container.engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE runs SET lease_owner = 'w:2' WHERE id = :i"), {"i": stolen.id}
        )
    completions = []
    for run_id in (mine.id, stolen.id):
        held[run_id].record_attempt("w:1", OK, AT, None)
        completions.append(Completion.of(held[run_id], "w:1"))
    # A completion under an owner that never held `other`: dropped as well.
    held[other.id].lease_owner = "w:9"
    held[other.id].record_attempt("w:9", OK, AT, None)
    completions.append(Completion.of(held[other.id], "w:9"))

    async with uows() as uow:
        written = await uow.runs.settle_leased(completions)
        await uow.commit()

    assert written == {mine.id}
    status = {r.id: (r.status, r.lease_owner) for r in await run_rows(container)}
    assert status == {
        mine.id: ("succeeded", None),
        stolen.id: ("in_progress", "w:2"),
        other.id: ("in_progress", "w:1"),
    }
    attempts = await rows(container, delivery_attempts)
    assert [(a.run_id, a.number, a.status_code, a.duration_ms) for a in attempts] == [
        (mine.id, 1, 200, 3)
    ]
    events = await rows(container, outbox)
    assert [(e.type, e.key) for e in events] == [("schedule.run.succeeded", s.id)]


async def test_outbox_rows_keep_completion_order_and_ignore_duplicates(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    runs = [_run(s.id, n) for n in range(5)]
    held = await _claimed(uows, runs)
    order = [runs[3], runs[0], runs[4], runs[1], runs[2]]
    completions = []
    for i, run in enumerate(order):
        r = held[run.id]
        r.record_attempt("w:1", OK, AT + timedelta(milliseconds=i), None)
        extra = DomainEvent(
            id=f"evt_extra_{i % 2}",  # every other one repeats an id: stored once
            type="schedule.triggered",
            tenant_id="tenant-a",
            time=AT,
            schedule_id=s.id,
            data={"i": i},
        )
        completions.append(Completion.of(r, "w:1", [extra]))
    async with uows() as uow:
        assert await uow.runs.settle_leased(completions) == {r.id for r in runs}
        await uow.commit()
    async with container.engine.connect() as conn:
        got = list(await conn.execute(sa.select(outbox).order_by(outbox.c.id)))
    expected: list[str] = []
    for c in completions:
        expected += [e.id for e in c.events if e.id not in expected]
    assert [e.event_id for e in got] == expected
    assert len(got) == 5 + 2


async def test_breaker_count_resets_only_where_written_runs_all_succeeded(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    calm = await add_schedule(container, "http://127.0.0.1:9/x", name="calm")
    mixed = await add_schedule(container, "http://127.0.0.1:9/x", name="mixed")
    lost = await add_schedule(container, "http://127.0.0.1:9/x", name="lost")
    for s in (calm, mixed, lost):
        await _set_failures(container, s.id, 3)
    calm_run, mixed_ok, mixed_bad, lost_run = (
        _run(calm.id, 1),
        _run(mixed.id, 2),
        _run(mixed.id, 3),
        _run(lost.id, 4),
    )
    held = await _claimed(uows, [calm_run, mixed_ok, mixed_bad, lost_run])
    async with container.engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE runs SET lease_owner = 'w:2' WHERE id = :i"), {"i": lost_run.id}
        )
    outcomes = {calm_run.id: OK, mixed_ok.id: OK, mixed_bad.id: FAILED, lost_run.id: OK}
    completions = []
    for run_id, outcome in outcomes.items():
        held[run_id].record_attempt("w:1", outcome, AT, None)
        completions.append(Completion.of(held[run_id], "w:1"))
    async with uows() as uow:
        await uow.runs.settle_leased(completions)
        await uow.commit()
    # calm: all succeeded -> 0. mixed: a failure in the group, left for the ordered breaker.
    # lost: its success was not written, so it must not reset the count either.
    counts = [
        (await schedule_row(container, s.id)).consecutive_failures for s in (calm, mixed, lost)
    ]
    assert counts == [0, 3, 3]


async def test_a_rolled_back_settle_leaves_nothing(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    run = _run(s.id, 1)
    held = await _claimed(uows, [run])
    held[run.id].record_attempt("w:1", OK, AT, None)
    async with uows() as uow:
        assert await uow.runs.settle_leased([Completion.of(held[run.id], "w:1")]) == {run.id}
        # no commit: leaving the block rolls back
    ((status, owner),) = [(r.status, r.lease_owner) for r in await run_rows(container)]
    assert (status, owner) == ("in_progress", "w:1")
    assert await rows(container, delivery_attempts) == []
    assert await rows(container, outbox) == []


async def test_a_claim_runs_its_own_statements_on_generic_plans_only(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    """PostgreSQL: the planner settings go first (the expired-lease probe included), the lanes
    follow, and the plan choice is handed back before the rest of the claim's transaction."""
    if container.engine.dialect.name != "postgresql":
        pytest.skip("the asyncpg claim is PostgreSQL's")
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    async with uows() as uow:
        assert await uow.runs.insert_runs([_run(s.id, n) for n in range(3)]) == 3
        await uow.commit()
    with _statements(container) as seen:
        async with uows() as uow:
            claimed = (await uow.runs.claim_due_runs("w:1", AT, AT + LEASE, 10)).runs
            await uow.commit()
    assert len(claimed) == 3
    assert seen[0] == claims_pg.CLAIM_PLANNER, seen
    assert "force_generic_plan" in claims_pg.CLAIM_PLANNER
    assert seen[1] == claims_pg.EXPIRED, seen
    assert seen[-1] == CONFIGURED_PLANS_SQL, seen
    assert CONFIGURED_PLANS_SQL not in seen[:-1], seen


async def test_an_all_succeeded_settle_is_one_statement_on_postgres_four_on_sqlite(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    runs = [_run(s.id, n) for n in range(40)]
    held = await _claimed(uows, runs)
    completions = []
    for r in runs:
        held[r.id].record_attempt("w:1", OK, AT, None)
        completions.append(Completion.of(held[r.id], "w:1"))
    with _statements(container) as seen:
        report = await settle_completions(uows, completions, AT)
    assert sorted(report.settled) == sorted(r.id for r in runs)
    assert len(await rows(container, delivery_attempts)) == 40
    assert len(await rows(container, outbox)) == 40
    if container.engine.dialect.name == "postgresql":
        # Lease check + run states + attempts + outbox + breaker reset: one statement, on its
        # generic plan (BEGIN and COMMIT are not cursor statements).
        assert seen == [GENERIC_PLANS_SQL, WRITE_OWNED_SQL, CONFIGURED_PLANS_SQL], seen
    else:
        # SQLite: runs (lease compare-and-set), attempts, outbox, breaker reset.
        assert len(seen) == 4, seen


async def test_a_group_larger_than_one_multi_row_statement_is_written_whole(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    # SQLite writes 500 rows per statement (its parameter limit): 1,100 runs span three.
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    runs = [_run(s.id, n) for n in range(1100)]
    held = await _claimed(uows, runs)
    completions = []
    for r in runs:
        held[r.id].record_attempt("w:1", OK, AT, None)
        completions.append(Completion.of(held[r.id], "w:1"))
    async with uows() as uow:
        assert await uow.runs.settle_leased(completions) == {r.id for r in runs}
        await uow.commit()
    assert {r.status for r in await run_rows(container)} == {"succeeded"}
    assert len(await rows(container, delivery_attempts)) == 1100
    assert len(await rows(container, outbox)) == 1100


@pytest.mark.parametrize("mode", ["custom", "generic", "stale"])
async def test_a_settle_reads_its_own_runs_not_every_leased_one(
    container: Container, uows: SqlUnitOfWorkFactory, mode: str
) -> None:
    """Other workers hold 1,500 leases: the settle of 10 runs locks them through the primary key
    (EXPLAIN), never through a partial index of the leased runs over all 1,510 of them; on the
    generic plan the settle runs on (GENERIC_PLANS_SQL) as on a plan for the values; and with
    the statistics of an empty table ("stale": a burst planned seconds ago, not yet analysed)."""
    if container.engine.dialect.name != "postgresql":
        pytest.skip("EXPLAIN of the PostgreSQL statement")
    if mode == "stale":
        async with container.engine.begin() as conn:
            await conn.execute(sa.text("ANALYZE runs"))
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    others = [_run(s.id, n) for n in range(1500)]
    await _claimed(uows, others, owner="w:other")
    mine = [_run(s.id, n) for n in range(1500, 1510)]
    held = await _claimed(uows, mine)
    if mode != "stale":
        async with container.engine.begin() as conn:
            await conn.execute(sa.text("ANALYZE runs"))
    completions = []
    for r in mine:
        held[r.id].record_attempt("w:1", OK, AT, None)
        completions.append(Completion.of(held[r.id], "w:1"))
    params = settle_params(completions)
    async with container.engine.connect() as conn:
        await conn.begin()
        db = await asyncpg_connection(conn)
        if mode in ("generic", "stale"):
            plan = await explain_generic(db, WRITE_OWNED_SQL, *params)
        else:
            explained = await db.fetch("EXPLAIN (ANALYZE, COSTS OFF) " + WRITE_OWNED_SQL, *params)
            plan = "\n".join(r[0] for r in explained)
        await conn.rollback()
    assert "ix_runs_lease" not in plan, plan
    assert "ix_runs_destination_leased" not in plan, plan
    most = max(int(n) for n in re.findall(r"actual time=\S+ rows=(\d+)", plan))
    # At most the 10 runs' index entries and those of their previous row versions (the claim's
    # update, until vacuum); never the 1,500 other leases.
    assert most <= 20, plan


async def test_lease_extensions_and_deferrals_probe_the_primary_key_on_stale_statistics(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    """With the statistics of an empty runs table (a burst planned seconds ago), the by-id
    statements on leased runs (lease extension, flow control's deferral) read their run through
    the primary key, not every leased run through a partial index (EXPLAIN ANALYZE of the
    statements the repository sends, with their parameters)."""
    if container.engine.dialect.name != "postgresql":
        pytest.skip("EXPLAIN of the PostgreSQL statements")
    async with container.engine.begin() as conn:
        await conn.execute(sa.text("ANALYZE runs"))
    s = await add_schedule(container, "http://127.0.0.1:9/x")
    held = await _claimed(uows, [_run(s.id, n) for n in range(1500)], owner="w:other")
    mine = sorted(held)[:1]
    sent: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, many: bool) -> None:
        if statement.startswith("UPDATE runs"):
            sent.append((statement, params[0] if many else params))

    sa.event.listen(container.engine.sync_engine, "before_cursor_execute", capture)
    try:
        async with uows() as uow:
            await uow.runs.extend_run_leases([(mine[0], "w:other")], AT + 2 * LEASE)
            await uow.destinations.defer_runs([Deferral(mine[0], "w:other", AT + LEASE)])
            await uow.rollback()
    finally:
        sa.event.remove(container.engine.sync_engine, "before_cursor_execute", capture)
    assert len(sent) == 2, sent
    for statement, params in sent:
        async with container.engine.connect() as conn:
            await conn.begin()
            result = await conn.exec_driver_sql("EXPLAIN (ANALYZE, COSTS OFF) " + statement, params)
            plan = "\n".join(r[0] for r in result)
            await conn.rollback()
        assert "runs_pkey" in plan, plan
        most = max(int(n) for n in re.findall(r"actual time=\S+ rows=(\d+)", plan))
        removed = [int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)]
        assert most <= 1, plan
        assert not any(removed), plan
