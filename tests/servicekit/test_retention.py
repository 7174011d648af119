"""The batch-pruning driver: stops on a short batch, flags a backlog at the cap, counts per table
(own rows and dependents), keeps step order. The retention worker: passes at the interval, a
second apart during a backlog, a failed pass retried with the loop's backoff and counted."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from enum import StrEnum

import pytest
from prometheus_client import CollectorRegistry, Counter

from servicekit.data.retention import (
    Deleted,
    PruneStep,
    RetentionReport,
    RetentionWorker,
    check_batching,
    prune_in_batches,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Table(StrEnum):
    PARENTS = "parents"
    CHILDREN = "children"
    OTHERS = "others"


class AgedRows:
    """A table of row ages; each parent row has `children_each` children deleted with it."""

    def __init__(self, ages: list[datetime], children_each: int = 0) -> None:
        self.ages = sorted(ages)
        self.children_each = children_each
        self.calls: list[tuple[datetime, int]] = []

    async def delete_before(self, cutoff: datetime, limit: int) -> Deleted[Table]:
        self.calls.append((cutoff, limit))
        old = [a for a in self.ages if a < cutoff][:limit]
        self.ages = self.ages[len(old) :]
        children = {Table.CHILDREN: len(old) * self.children_each} if old else {}
        return Deleted(rows=len(old), dependents=children)


def aged(count: int, days_old: int) -> list[datetime]:
    return [NOW - timedelta(days=days_old, seconds=i) for i in range(count)]


async def test_runs_batches_until_a_short_one_and_counts_dependents() -> None:
    parents = AgedRows(aged(7, 40) + aged(2, 1), children_each=3)
    report = await prune_in_batches(
        [PruneStep(Table.PARENTS, parents.delete_before, NOW - timedelta(days=30))],
        batch_size=3,
        max_batches=10,
    )
    # 3 + 3 + 1: the third batch is short, so no fourth call.
    assert len(parents.calls) == 3
    assert report.batches == 3
    assert report.deleted == {Table.PARENTS: 7, Table.CHILDREN: 21}
    assert report.total == 28
    assert not report.more
    assert len(parents.ages) == 2  # the young rows stay


async def test_a_full_batch_ends_with_one_empty_call() -> None:
    # Exactly batch_size old rows: the driver cannot know the table is drained until a short batch.
    parents = AgedRows(aged(4, 40))
    report = await prune_in_batches(
        [PruneStep(Table.PARENTS, parents.delete_before, NOW)], batch_size=4, max_batches=5
    )
    assert report.batches == 2
    assert report.deleted == {Table.PARENTS: 4}  # an empty batch adds no zero entry
    assert not report.more


async def test_cap_flags_backlog_and_moves_on_to_the_next_step() -> None:
    parents = AgedRows(aged(10, 40))
    others = AgedRows(aged(1, 40))
    report = await prune_in_batches(
        [
            PruneStep(Table.PARENTS, parents.delete_before, NOW),
            PruneStep(Table.OTHERS, others.delete_before, NOW),
        ],
        batch_size=2,
        max_batches=3,
    )
    assert report.more
    assert report.deleted == {Table.PARENTS: 6, Table.OTHERS: 1}
    assert len(parents.ages) == 4  # left for the next pass
    assert report.batches == 4


async def test_steps_run_in_order_with_their_own_cutoff() -> None:
    order: list[str] = []
    first, second = AgedRows([]), AgedRows([])

    async def one(cutoff: datetime, limit: int) -> Deleted[Table]:
        order.append("one")
        return await first.delete_before(cutoff, limit)

    async def two(cutoff: datetime, limit: int) -> Deleted[Table]:
        order.append("two")
        return await second.delete_before(cutoff, limit)

    c1, c2 = NOW - timedelta(days=1), NOW - timedelta(days=2)
    report = await prune_in_batches(
        [PruneStep(Table.PARENTS, one, c1), PruneStep(Table.OTHERS, two, c2)],
        batch_size=5,
        max_batches=5,
    )
    assert order == ["one", "two"]
    assert first.calls == [(c1, 5)]
    assert second.calls == [(c2, 5)]
    assert report.total == 0


@pytest.mark.parametrize(
    ("batch_size", "max_batches", "wrong"),
    [
        (0, 1, "batch_size"),
        (10_001, 1, "batch_size"),
        (1, 0, "max_batches"),
        (1, 10_001, "max_batches"),
    ],
)
async def test_refuses_empty_or_oversized_bounds(
    batch_size: int, max_batches: int, wrong: str
) -> None:
    with pytest.raises(ValueError, match=f"^{wrong} must be 1..10000$"):
        check_batching(batch_size, max_batches)
    with pytest.raises(ValueError, match=wrong):
        await prune_in_batches([], batch_size=batch_size, max_batches=max_batches)


def test_accepts_the_bounds_themselves() -> None:
    check_batching(1, 1)
    check_batching(10_000, 10_000)


class Passes:
    """`prune_once` answering from a script: an exception is raised, a report returned."""

    def __init__(self, *script: RetentionReport[Table] | Exception) -> None:
        self.script = list(script)
        self.times: list[datetime] = []

    async def __call__(self, now: datetime) -> RetentionReport[Table]:
        self.times.append(now)
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


async def test_worker_waits_backs_off_and_counts_by_table() -> None:
    registry = CollectorRegistry()
    deleted = Counter("t_deleted", "rows", ["table"], registry=registry)
    failures = Counter("t_failures", "passes", registry=registry)
    passes = Passes(
        ConnectionRefusedError("database down"),
        ConnectionRefusedError("database down"),
        RetentionReport({Table.PARENTS: 5, Table.CHILDREN: 10}, batches=2, more=True),
        RetentionReport({Table.PARENTS: 1}, batches=1),
    )
    waits: list[float] = []

    async def record(event: asyncio.Event, seconds: float) -> None:
        waits.append(seconds)
        if not passes.script:
            worker.stop()

    worker = RetentionWorker(
        passes,
        lambda: NOW,
        deleted=deleted,
        failures=failures,
        interval_seconds=300,
        waiter=record,
    )
    await asyncio.wait_for(worker.run(), 5)
    # Start delay; backoff 1 s, 2 s (the loop's rule); a second during the backlog; interval.
    assert waits == [30.0, 1.0, 2.0, 1.0, 300.0]
    assert passes.times == [NOW] * 4
    assert registry.get_sample_value("t_failures_total") == 2
    assert registry.get_sample_value("t_deleted_total", {"table": "parents"}) == 6
    assert registry.get_sample_value("t_deleted_total", {"table": "children"}) == 10
    assert worker.last_report is not None
    assert worker.last_report.total == 1


def test_worker_waits_never_exceed_the_interval() -> None:
    deleted = Counter("t_short", "rows", ["table"], registry=CollectorRegistry())
    worker = RetentionWorker(Passes(), lambda: NOW, deleted=deleted, interval_seconds=0.5)
    assert worker.loop.start_delay_seconds == 0.5
    assert worker.loop.backoff.initial_seconds == 0.5
    assert worker.loop.backoff.max_seconds == 0.5
