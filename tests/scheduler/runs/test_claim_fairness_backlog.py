"""Fair claims whatever the backlog (PostgreSQL, the multi-replica store): tenant A's 10,000 runs
due at one instant, or a standing backlog of older retrying runs, never go before tenant B's 50
runs due at the same instant. B's lag is then one claim's time, not A's backlog's: B's runs are
all taken in the first claims, each claim a bounded set of index probes (EXPLAIN-checked).

Before the per-tenant claim (sql_postgres.FAIR_CHOICE_SQL) the fair ranking only saw the oldest
claim window (800 runs, all A's), so B's first run waited behind about all of A's: these tests
failed with B's first run in claim 101 of 100 runs."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from scheduler.adapters.db.runs import claims_pg
from scheduler.adapters.db.runs.claims import FAIR_TENANT_SCAN
from scheduler.adapters.db.types import UTCDateTime
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from servicekit.data.database import asyncpg_connection
from tests.scheduler.runs.conftest import T0
from tests.scheduler.runs.dispatch_helpers import claim_runs
from tests.support.pg import explain_generic

pytestmark = pytest.mark.postgres

LEASE = timedelta(seconds=30)
CLAIM = 100
B_RUNS = 50


async def _seed(container: Container, tenant: str, n: int, *, status: str, due_s: float) -> None:
    """n runs of `tenant` due at T0 + due_s, inserted in one statement (fast for big backlogs)."""
    due = T0 + timedelta(seconds=due_s)
    async with container.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "INSERT INTO runs (id, tenant_id, schedule_id, scheduled_for, trigger, status,"
                " attempt_count, next_attempt_at, created_at)"
                " SELECT :prefix || lpad(i::text, 7, '0'), :tenant, :sch, :due, 'manual',"
                " :status, :attempts, :due, :due FROM generate_series(1, :n) i"
            ).bindparams(sa.bindparam("due", type_=UTCDateTime())),
            {
                "prefix": f"run_{tenant}_",
                "tenant": tenant,
                "sch": f"sch_{tenant}",
                "due": due,
                "status": status,
                "attempts": 1 if status == "retrying" else 0,
                "n": n,
            },
        )
        await conn.execute(sa.text("ANALYZE runs"))


async def _claims_until_b_started(uows: SqlUnitOfWorkFactory) -> tuple[int, float, set[str]]:
    """Claim batches of CLAIM (as one worker does) until every B run is taken: the number of
    claims, the seconds they took and every id claimed."""
    now = T0 + timedelta(seconds=1)
    seen: set[str] = set()
    b_left = B_RUNS
    started = time.perf_counter()
    for n in range(1, 1_000):
        async with uows() as uow:
            claimed = await claim_runs(uow.runs, "w:1", now, now + LEASE, CLAIM)
            await uow.commit()
        ids = {r.id for r in claimed}
        assert not ids & seen, "a run claimed twice"
        seen |= ids
        b_left -= sum(r.tenant_id == "b" for r in claimed)
        if b_left == 0:
            return n, time.perf_counter() - started, seen
    raise AssertionError("B's runs were never all claimed")


def _check(claims: int, seconds: float, seen: set[str]) -> None:
    # One claim of 100 shared by two due tenants: B's 50 all go in it, beside 50 of A's.
    assert claims == 1, claims
    assert len(seen) == CLAIM
    # Generous for a loaded 2-core machine; on a quiet one the claim takes a few milliseconds.
    assert seconds < 1.0, seconds


async def test_b_starts_in_the_first_claim_beside_a_burst_of_a(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    if container.engine.dialect.name != "postgresql":
        pytest.skip("the per-tenant claim is PostgreSQL's")
    await _seed(container, "a", 10_000, status="pending", due_s=-0.5)  # A's even a bit earlier
    await _seed(container, "b", B_RUNS, status="pending", due_s=0)
    _check(*await _claims_until_b_started(uows))


async def test_b_starts_in_the_first_claim_beside_a_standing_retry_backlog(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    if container.engine.dialect.name != "postgresql":
        pytest.skip("the per-tenant claim is PostgreSQL's")
    await _seed(container, "a", 30_000, status="retrying", due_s=-3_600)  # retries due for an hour
    await _seed(container, "b", B_RUNS, status="pending", due_s=0)
    _check(*await _claims_until_b_started(uows))


@pytest.mark.parametrize("mode", ["custom", "generic"])
async def test_the_fair_claim_reads_index_entries_in_proportion_to_the_claim(
    container: Container, mode: str
) -> None:
    """generic: the plan every claim runs (CLAIM_PLANNER_SQL forces it); custom: the plan for
    these values (what EXPLAIN with values shows), the same shape."""
    if container.engine.dialect.name != "postgresql":
        pytest.skip("the per-tenant claim is PostgreSQL's")
    await _seed(container, "a", 10_000, status="pending", due_s=-0.5)
    await _seed(container, "b", B_RUNS, status="pending", due_s=0)
    for t in range(20):  # tenants with runs planned ahead, not due: walked, not claimed
        await _seed(container, f"later{t:02d}", 5, status="pending", due_s=3_600)
    now = T0 + timedelta(seconds=1)
    async with container.engine.connect() as conn:  # the claim statement itself, rolled back
        await conn.begin()
        db = await asyncpg_connection(conn)
        await db.execute(claims_pg.CLAIM_PLANNER)
        args = ("w:explain", now + LEASE, now, CLAIM, FAIR_TENANT_SCAN)
        if mode == "generic":
            plan = await explain_generic(db, claims_pg.FAIR, *args)
        else:
            rows = await db.fetch("EXPLAIN (ANALYZE, COSTS OFF) " + claims_pg.FAIR, *args)
            plan = "\n".join(r[0] for r in rows)
        await conn.rollback()
    assert ("next_attempt_at <= $3" in plan) == (mode == "generic"), plan  # not the value
    assert "Seq Scan" not in plan, plan
    assert "Bitmap" not in plan, plan
    assert "ix_runs_live_due_tenant" in plan, plan
    # No node produces more rows than a claim's worth (10,000 due runs of A are never read).
    most = max(int(n) for n in re.findall(r"actual time=\S+ rows=(\d+)", plan))
    assert most <= CLAIM, plan


async def test_b_starts_in_the_first_claim_past_many_tenants_with_nothing_due(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    """More tenants than the walk's limit sort between A and B with only runs planned ahead:
    they are passed over, not counted, so B is walked (and served) in the first claim. Before,
    the walk stopped after 1,000 of them and B's runs waited behind A's backlog."""
    if container.engine.dialect.name != "postgresql":
        pytest.skip("the per-tenant claim is PostgreSQL's")
    await _seed(container, "a", 10_000, status="pending", due_s=-0.5)
    await _seed(container, "b", B_RUNS, status="pending", due_s=0)
    async with container.engine.begin() as conn:  # "a_0000".."a_1199" sort between "a" and "b"
        await conn.execute(
            sa.text(
                "INSERT INTO runs (id, tenant_id, schedule_id, scheduled_for, trigger, status,"
                " attempt_count, next_attempt_at, created_at)"
                " SELECT 'run_later_' || i, 'a_' || lpad(i::text, 4, '0'), 'sch_later_' || i,"
                " :due, 'schedule', 'pending', 0, :due, :due FROM generate_series(0, 1199) i"
            ).bindparams(sa.bindparam("due", type_=UTCDateTime())),
            {"due": T0 + timedelta(hours=1)},
        )
        await conn.execute(sa.text("ANALYZE runs"))
    assert FAIR_TENANT_SCAN < 1_200
    claims, _, seen = await _claims_until_b_started(uows)
    assert claims == 1, claims
    assert len(seen) == CLAIM
    assert not any(i.startswith("run_later_") for i in seen)
