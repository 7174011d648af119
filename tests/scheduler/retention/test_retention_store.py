"""Retention over real SQL (SQLite and PostgreSQL): what goes, what stays, and that every batch
is bounded. Ages are set by writing rows directly; `now` is passed in (no clock is read)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.adapters.db.retention_store import (
    deleted_schedules_batch,
    idempotency_keys_batch,
    processed_events_batch,
    sent_outbox_batch,
    terminal_runs_batch,
)
from scheduler.adapters.db.tables import (
    delivery_attempts,
    idempotency_keys,
    outbox,
    runs,
    schedules,
)
from scheduler.adapters.db.tenant_store import processed_events
from scheduler.adapters.db.unit_of_work import SqlUnitOfWorkFactory
from scheduler.adapters.secret_box import SecretBox
from scheduler.service_layer.retention import RetainedTable, RetentionPolicy, prune_once
from tests.scheduler.retention.conftest import (
    DAY,
    NOW,
    add_idempotency_key,
    add_outbox,
    add_processed,
    add_runs,
    add_schedule,
    count,
    ids_of,
    one_batch,
)

# 90 days of runs, 24 h of idempotency keys, 30 days of event ids, 7 days of sent outbox rows
POLICY = RetentionPolicy()


async def test_old_terminal_runs_go_with_their_attempts_others_stay(
    engine: AsyncEngine, uows: SqlUnitOfWorkFactory
) -> None:
    await add_schedule(engine, "sch_a")
    old = NOW - 91 * DAY
    young = NOW - 89 * DAY
    gone: list[str] = []
    for status in ("succeeded", "failed", "skipped"):
        gone += await add_runs(engine, "sch_a", 2, status=status, finished_at=old, attempts=2)
    kept = await add_runs(engine, "sch_a", 2, status="succeeded", finished_at=young, prefix="y")
    # Non-terminal runs are never deleted, however old they are.
    for status in ("pending", "retrying", "in_progress"):
        kept += await add_runs(engine, "sch_a", 1, status=status, finished_at=None, prefix=status)
    async with engine.begin() as conn:  # an old run that is somehow unfinished: still kept
        await conn.execute(
            sa.update(runs).where(runs.c.id == "pending_0").values(created_at=NOW - 400 * DAY)
        )

    report = await prune_once(uows, POLICY, NOW)

    assert await ids_of(engine, runs.c.id) == set(kept)
    assert report.deleted[RetainedTable.RUNS] == len(gone)
    assert report.deleted[RetainedTable.DELIVERY_ATTEMPTS] == 2 * len(gone)
    # Attempts of the kept runs are untouched; none of the deleted runs' attempts remain.
    assert await ids_of(engine, delivery_attempts.c.run_id) == set(kept)
    assert not report.more


async def test_each_batch_is_bounded_and_a_pass_is_bounded(
    engine: AsyncEngine, uows: SqlUnitOfWorkFactory
) -> None:
    await add_schedule(engine, "sch_a")
    await add_runs(engine, "sch_a", 10, status="succeeded", finished_at=NOW - 100 * DAY)

    one = await one_batch(uows, lambda r: r.delete_terminal_runs(NOW - 90 * DAY, 3))
    assert one.rows == 3
    assert one.dependents[RetainedTable.DELIVERY_ATTEMPTS] == 3
    assert await count(engine, runs) == 7

    small = RetentionPolicy(batch_size=3, max_batches=2)
    first = await prune_once(uows, small, NOW)
    assert first.deleted[RetainedTable.RUNS] == 6  # two batches of three, then stop
    assert first.more  # and say that a backlog remains
    assert await count(engine, runs) == 1

    second = await prune_once(uows, small, NOW)
    assert second.deleted[RetainedTable.RUNS] == 1
    assert not second.more
    assert await count(engine, runs) == 0
    assert await count(engine, delivery_attempts) == 0


async def test_oldest_runs_go_first(engine: AsyncEngine, uows: SqlUnitOfWorkFactory) -> None:
    await add_schedule(engine, "sch_a")
    oldest = await add_runs(engine, "sch_a", 2, status="failed", finished_at=NOW - 300 * DAY)
    await add_runs(engine, "sch_a", 2, status="failed", finished_at=NOW - 100 * DAY, prefix="n")
    await one_batch(uows, lambda r: r.delete_terminal_runs(NOW - 90 * DAY, 2))
    assert not (set(oldest) & await ids_of(engine, runs.c.id))


async def test_deleted_schedule_is_purged_after_its_runs_with_its_keys(
    engine: AsyncEngine, uows: SqlUnitOfWorkFactory
) -> None:
    long_ago = NOW - 120 * DAY
    await add_schedule(engine, "sch_gone", deleted_at=long_ago)
    await add_schedule(engine, "sch_recent", deleted_at=NOW - 10 * DAY)
    await add_schedule(engine, "sch_live")  # never deleted: stays however old
    await add_schedule(engine, "sch_busy", deleted_at=long_ago)
    await add_runs(engine, "sch_gone", 3, status="succeeded", finished_at=NOW - 100 * DAY)
    # A young run keeps its deleted schedule: history stays until retention.
    await add_runs(engine, "sch_busy", 1, status="failed", finished_at=NOW - 5 * DAY)
    # Keys younger than the TTL, so only the purge can remove them.
    await add_idempotency_key(engine, "k-gone", "sch_gone", NOW - DAY / 24)
    await add_idempotency_key(engine, "k-busy", "sch_busy", NOW - DAY / 24)

    report = await prune_once(uows, POLICY, NOW)

    # Runs went first in the same pass, so sch_gone had no run left when schedules were purged.
    assert await ids_of(engine, schedules.c.id) == {"sch_recent", "sch_live", "sch_busy"}
    assert await ids_of(engine, idempotency_keys.c.key) == {"k-busy"}
    assert report.deleted[RetainedTable.SCHEDULES] == 1
    assert report.deleted[RetainedTable.IDEMPOTENCY_KEYS] == 1


async def test_idempotency_keys_expire_after_the_ttl(
    engine: AsyncEngine, uows: SqlUnitOfWorkFactory
) -> None:
    await add_schedule(engine, "sch_a")
    await add_idempotency_key(engine, "old", "sch_a", NOW - DAY - DAY / 24)
    await add_idempotency_key(engine, "young", "sch_a", NOW - DAY + DAY / 24)
    report = await prune_once(uows, POLICY, NOW)
    assert await ids_of(engine, idempotency_keys.c.key) == {"young"}
    assert report.deleted == {RetainedTable.IDEMPOTENCY_KEYS: 1}


async def test_processed_event_ids_expire_after_30_days(
    engine: AsyncEngine, uows: SqlUnitOfWorkFactory
) -> None:
    for i in range(5):
        await add_processed(engine, f"old-{i}", NOW - 31 * DAY)
    await add_processed(engine, "young", NOW - 29 * DAY)
    one = await one_batch(uows, lambda r: r.delete_processed_events(NOW - 30 * DAY, 2))
    assert one.rows == 2  # bounded
    await prune_once(uows, POLICY, NOW)
    assert await ids_of(engine, processed_events.c.event_id) == {"young"}


async def test_sent_outbox_rows_older_than_the_retention_go_younger_and_unsent_ones_stay(
    engine: AsyncEngine, uows: SqlUnitOfWorkFactory
) -> None:
    old = await add_outbox(engine, "old", 3, sent_at=NOW - 8 * DAY)
    young = await add_outbox(engine, "young", 2, sent_at=NOW - 7 * DAY + DAY / 24)
    # Unsent rows are the relay's backlog: never deleted, however old (created 400 days ago).
    unsent = await add_outbox(engine, "unsent", 2, sent_at=None)

    report = await prune_once(uows, POLICY, NOW)

    assert report.deleted == {RetainedTable.OUTBOX: len(old)}
    assert await ids_of(engine, outbox.c.event_id) == set(young + unsent)

    # A shorter setting takes the young ones too; the unsent ones still stay.
    await prune_once(uows, RetentionPolicy(outbox_retention=timedelta(days=1)), NOW)
    assert await ids_of(engine, outbox.c.event_id) == set(unsent)


async def test_sent_outbox_batches_are_bounded_and_oldest_first(
    engine: AsyncEngine, uows: SqlUnitOfWorkFactory
) -> None:
    oldest = await add_outbox(engine, "oldest", 2, sent_at=NOW - 30 * DAY)
    newer = await add_outbox(engine, "newer", 2, sent_at=NOW - 10 * DAY)

    one = await one_batch(uows, lambda r: r.delete_sent_outbox(NOW - 7 * DAY, 2))

    assert one.rows == 2
    assert await ids_of(engine, outbox.c.event_id) == set(newer)
    assert not set(oldest) & await ids_of(engine, outbox.c.event_id)


async def test_batch_limit_is_validated(uows: SqlUnitOfWorkFactory) -> None:
    with pytest.raises(ValueError, match="batch limit"):
        await one_batch(uows, lambda r: r.delete_terminal_runs(NOW, 10_001))
    with pytest.raises(ValueError, match="batch limit"):
        await one_batch(uows, lambda r: r.delete_sent_outbox(NOW, 10_001))
    with pytest.raises(ValueError, match="batch_size"):
        RetentionPolicy(batch_size=0)
    with pytest.raises(ValueError, match="outbox_retention"):
        RetentionPolicy(outbox_retention=timedelta(seconds=-1))


@pytest.mark.postgres
async def test_replicas_pruning_at_once_take_disjoint_batches(database_url: str) -> None:
    """Two stores (two engines: two replicas) drain one backlog concurrently: SKIP LOCKED lets
    them share it without waiting or failing, and every old run is deleted exactly once."""
    if not database_url.startswith("postgresql"):
        pytest.skip("row locks: PostgreSQL only")
    from scheduler.adapters.db.engine import create_engine

    engines = [create_engine(database_url) for _ in range(2)]
    try:
        await add_schedule(engines[0], "sch_a")
        await add_runs(engines[0], "sch_a", 400, status="succeeded", finished_at=NOW - 91 * DAY)
        policy = RetentionPolicy(batch_size=50, max_batches=100)
        reports = await asyncio.gather(
            *(
                prune_once(SqlUnitOfWorkFactory(e, SecretBox([b"k" * 32])), policy, NOW)
                for e in engines
            )
        )
        assert sum(r.deleted.get(RetainedTable.RUNS, 0) for r in reports) == 400
        assert await count(engines[0], runs) == 0
        assert await count(engines[0], delivery_attempts) == 0
    finally:
        for e in engines:
            await e.dispose()


@pytest.mark.postgres
async def test_replicas_pruning_the_outbox_at_once_delete_each_sent_row_once(
    database_url: str,
) -> None:
    """As above for the outbox: every worker process prunes it, so concurrent passes share its
    backlog, and no pass touches an unsent row."""
    if not database_url.startswith("postgresql"):
        pytest.skip("row locks: PostgreSQL only")
    from scheduler.adapters.db.engine import create_engine

    engines = [create_engine(database_url) for _ in range(2)]
    try:
        await add_outbox(engines[0], "old", 400, sent_at=NOW - 8 * DAY)
        unsent = await add_outbox(engines[0], "unsent", 3, sent_at=None)
        policy = RetentionPolicy(batch_size=50, max_batches=100)
        reports = await asyncio.gather(
            *(
                prune_once(SqlUnitOfWorkFactory(e, SecretBox([b"k" * 32])), policy, NOW)
                for e in engines
            )
        )
        assert sum(r.deleted.get(RetainedTable.OUTBOX, 0) for r in reports) == 400
        assert await ids_of(engines[0], outbox.c.event_id) == set(unsent)
    finally:
        for e in engines:
            await e.dispose()


@pytest.mark.postgres
async def test_batch_selections_can_use_the_retention_indexes(
    database_url: str, engine: AsyncEngine
) -> None:
    """With sequential scans disabled, each batch's selection is planned on its index: the
    partial-index predicates in the queries match migrations 0004 and 0005 (a mismatch would
    scan)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("EXPLAIN: PostgreSQL only")
    cutoff = NOW - 90 * DAY
    selections = {
        "ix_runs_terminal_finished": terminal_runs_batch(cutoff, 10),
        "ix_schedules_deleted": deleted_schedules_batch(cutoff, 10),
        "ix_idempotency_keys_created": idempotency_keys_batch(cutoff, 10),
        "ix_processed_events_at": processed_events_batch(cutoff, 10),
        "ix_outbox_sent_at": sent_outbox_batch(cutoff, 10),
    }
    async with engine.connect() as conn:
        await conn.execute(sa.text("SET enable_seqscan = off"))
        for index, query in selections.items():
            compiled = query.compile(engine.sync_engine, compile_kwargs={"literal_binds": True})
            plan = "\n".join((await conn.execute(sa.text(f"EXPLAIN {compiled}"))).scalars().all())
            assert index in plan, plan
