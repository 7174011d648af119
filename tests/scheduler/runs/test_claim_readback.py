"""A claimed run is the run the database holds: the claim maps its narrow RETURNING columns
itself on PostgreSQL (`claims_pg.run_of`, `claims_pg.specs_of`) and through the ORM rows on
SQLite, so every lane's Run and DeliverySpec are compared with the same run and schedule read
back afterwards (`get_run`, `delivery_specs`). A column added to runs or schedules but missed by
one mapping fails here."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from scheduler.adapters.db.runs.rows import run_to_row
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.bootstrap import Container
from scheduler.domain.run import Run, Trigger
from scheduler.service_layer import schedules as schedule_svc
from tests.scheduler.runs.conftest import SECRET, T0, add_schedule

LEASE = timedelta(seconds=30)
HOOK = "https://hooks.example.com/run?x=1"  # stored, never called
NEW_SECRET = "whsec_" + "bmV3LW5ldy1uZXctbmV3LW5ldy1uZXctbmV3LW5ldy0w"
FIRST = T0 + timedelta(seconds=5)  # the first claim
LATER = FIRST + LEASE + timedelta(seconds=1)  # its leases have run out


async def _claim_and_read_back(
    uows: SqlUnitOfWorkFactory, owner: str, at: datetime, tenant: str
) -> list[tuple[Run, Run]]:
    async with uows() as uow:
        claim = await uow.runs.claim_due_runs(owner, at, at + LEASE, 10)
        claimed, specs = claim.runs, claim.specs
        await uow.commit()
    assert claimed
    async with uows() as uow:
        read = {r.id: await uow.runs.get_run(tenant, r.schedule_id, r.id) for r in claimed}
        fresh = await uow.runs.delivery_specs([r.schedule_id for r in claimed], at)
    assert specs == fresh  # the spec the claim built is the one read on its own
    pairs = []
    for run in claimed:
        back = read[run.id]
        assert back is not None
        pairs.append((run, back))
    return pairs


async def test_every_lanes_claimed_run_equals_its_row_read_back(
    container: Container, uows: SqlUnitOfWorkFactory
) -> None:
    live = await add_schedule(container, HOOK, name="live", payload={"n": 1, "s": "é\u2028"})
    backfill = await add_schedule(container, HOOK, name="backfill")
    # The live schedule signs with two secrets (a rotation's grace period), the other with one.
    await schedule_svc.rotate_secret(
        uows(),
        tenant_id="tenant-a",
        schedule_id=live.id,
        clock=lambda: T0 - timedelta(minutes=1),
        new_secret=lambda: NEW_SECRET,
        grace=timedelta(hours=1),
    )
    planned = Run.planned(
        tenant_id="tenant-a",
        schedule_id=live.id,
        scheduled_for=T0,
        now=T0 - timedelta(minutes=1),
        payload={"n": 1, "nested": {"list": [1, 2.5, None, True]}},
        due_at=T0 + timedelta(seconds=2),  # jittered: due_at differs from scheduled_for
        run_id="run_live_0001",
    )
    filled = replace(
        Run.planned(
            tenant_id="tenant-a",
            schedule_id=backfill.id,
            scheduled_for=T0 - timedelta(days=1),
            now=T0 - timedelta(minutes=1),
            trigger=Trigger.BACKFILL,
            run_id="run_bf_0001",
        ),
        backfill_id="bfl_0001",
    )
    async with uows() as uow:
        assert await uow.runs.insert_runs([planned, filled]) == 2
        await uow.commit()

    # The live lanes and the backfill lane, in one claim.
    first = await _claim_and_read_back(uows, "w:1", FIRST, "tenant-a")
    assert {r.id for r, _ in first} == {planned.id, filled.id}
    for run, back in first:
        assert run_to_row(run) == run_to_row(back)
    claimed = {r.id: r for r, _ in first}
    assert claimed[planned.id].payload == planned.payload
    assert claimed[planned.id].due_at == planned.due_at
    assert claimed[filled.id].backfill_id == "bfl_0001"
    async with uows() as uow:
        specs = await uow.runs.delivery_specs([live.id, backfill.id], FIRST)
    assert specs[live.id].secrets == (NEW_SECRET, SECRET)  # current first, then the previous
    assert specs[backfill.id].secrets == (SECRET,)

    # Their leases run out: the reclaim lane takes them over and counts the lost attempt.
    second = await _claim_and_read_back(uows, "w:2", LATER, "tenant-a")
    assert {r.id for r, _ in second} == {planned.id, filled.id}
    for run, back in second:
        assert run_to_row(run) == run_to_row(back)
        assert run.attempt_count == 1
        assert run.lease_owner == "w:2"
        assert run.started_at == FIRST  # the first claim's start, kept
