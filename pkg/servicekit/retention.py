"""Batch pruning, the mechanism behind each service's retention pass.

Each service keeps its own policy (what goes, after how long, in which order) and its own store;
this module only drives the batches: for each step, call its batch until a batch comes back short
(fewer rows than `batch_size`: nothing older is left) or `max_batches` is reached (a backlog: the
next pass continues), and count deleted rows per table.

    report = await prune_in_batches(
        [PruneStep(Table.RUNS, store.delete_terminal_runs, now - keep_runs), ...],
        batch_size=5_000,
        max_batches=100,
    )
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Generic, NamedTuple, TypeVar

TableT = TypeVar("TableT", bound=StrEnum)

# Rows per transaction and batches per step per pass: a batch must not hold locks for long, and
# a pass must end (the next continues).
MAX_BATCH_SIZE = 10_000
MAX_BATCHES = 10_000


def check_batching(batch_size: int, max_batches: int) -> None:
    """Raise ValueError unless both are within 1..10000 (a policy calls this when built)."""
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"batch_size must be 1..{MAX_BATCH_SIZE}")
    if not 1 <= max_batches <= MAX_BATCHES:
        raise ValueError(f"max_batches must be 1..{MAX_BATCHES}")


@dataclass(frozen=True)
class Deleted(Generic[TableT]):
    """What one batch removed."""

    rows: int
    """Rows of the batch's own table (decides whether another batch is needed)."""
    dependents: dict[TableT, int] = field(default_factory=dict)
    """Rows removed with them from other tables (a run's attempts, a delivery's attempts)."""


@dataclass
class RetentionReport(Generic[TableT]):
    deleted: dict[TableT, int] = field(default_factory=dict)
    batches: int = 0
    more: bool = False
    """A step hit `max_batches`: rows older than its cutoff remain for the next pass."""

    def add(self, table: TableT, count: int) -> None:
        if count:
            self.deleted[table] = self.deleted.get(table, 0) + count

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


class PruneStep(NamedTuple, Generic[TableT]):
    table: TableT
    """The table whose rows `batch` counts in `Deleted.rows`."""
    batch: Callable[[datetime, int], Awaitable[Deleted[TableT]]]
    """One batch in one transaction: at most `limit` rows older than `cutoff`."""
    cutoff: datetime


async def prune_in_batches(
    steps: Sequence[PruneStep[TableT]], *, batch_size: int, max_batches: int
) -> RetentionReport[TableT]:
    """Run the steps in order, each until a short batch or `max_batches` batches."""
    check_batching(batch_size, max_batches)
    report: RetentionReport[TableT] = RetentionReport()
    for table, batch, cutoff in steps:
        for _ in range(max_batches):
            deleted = await batch(cutoff, batch_size)
            report.batches += 1
            report.add(table, deleted.rows)
            for other, count in deleted.dependents.items():
                report.add(other, count)
            if deleted.rows < batch_size:
                break
        else:
            report.more = True
    return report
