"""Batch pruning and the retention worker, the mechanism behind each service's retention.

Each service keeps its own policy (what goes, after how long, in which order) and its own store;
this module drives the batches and the passes:

- `prune_in_batches`: for each step, call its batch until a batch comes back short (fewer rows
  than `batch_size`: nothing older is left) or `max_batches` is reached (a backlog: the next pass
  continues), and count deleted rows per table.
- `RetentionWorker`: a servicekit `WorkerLoop` that runs the service's `prune_once(now)` every
  `interval_seconds` (the first pass after a start delay, at most one interval: start-up goes
  first), about a second apart while a backlog remains, and counts deleted rows per table in the
  service's Prometheus counter. A failed pass (database down) is logged and retried with the
  loop's backoff: from a second, doubling, at most every MAX_RETRY_SECONDS and never later than
  the next regular pass would have been.

    report = await prune_in_batches(
        [PruneStep(Table.RUNS, store.delete_terminal_runs, now - keep_runs), ...],
        batch_size=5_000,
        max_batches=100,
    )
    worker = RetentionWorker(
        lambda now: prune_once(store, policy, now), clock, deleted=counter, interval_seconds=300
    )
    group.add_loop(worker.loop)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Generic, NamedTuple, TypeVar

from prometheus_client import Counter, Gauge

from servicekit.runtime.worker import Waiter, WorkerLoop, wait_event

TableT = TypeVar("TableT", bound=StrEnum)

log = logging.getLogger("servicekit.data.retention")

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


# Between passes while a backlog remains: lets other writers in.
BACKLOG_PAUSE_SECONDS = 1.0
# The first pass waits this long (at most one interval): migrations and catch-up go first.
FIRST_PASS_DELAY_SECONDS = 30.0
# A failed pass is tried again at least this often (and never later than the interval).
MAX_RETRY_SECONDS = 30.0


class RetentionWorker(Generic[TableT]):
    """One retention loop: `group.add_loop(worker.loop)`, or `run()` / `stop()`."""

    def __init__(
        self,
        prune_once: Callable[[datetime], Awaitable[RetentionReport[TableT]]],
        clock: Callable[[], datetime],
        *,
        deleted: Counter,
        interval_seconds: float,
        start_delay_seconds: float = FIRST_PASS_DELAY_SECONDS,
        failures: Counter | None = None,
        last_success: Gauge | None = None,
        logger: logging.Logger | None = None,
        waiter: Waiter = wait_event,
    ) -> None:
        """`deleted` has one label, `table`; `failures` counts failed passes and `last_success`
        holds the Unix time of the last pass that completed (both optional); `waiter` as for
        `WorkerLoop`."""
        if interval_seconds <= 0 or start_delay_seconds < 0:
            raise ValueError("interval_seconds must be > 0 and start_delay_seconds >= 0")
        self.prune_once = prune_once
        self.clock = clock
        self.deleted = deleted
        self.failures = failures
        self.last_success = last_success
        self.interval_seconds = interval_seconds
        self.log = logger or log
        self.last_report: RetentionReport[TableT] | None = None
        self.loop = WorkerLoop(
            "retention",
            self.step,
            idle_seconds=interval_seconds,
            start_delay_seconds=min(start_delay_seconds, interval_seconds),
            backoff_initial_seconds=min(BACKLOG_PAUSE_SECONDS, interval_seconds),
            backoff_max_seconds=min(MAX_RETRY_SECONDS, interval_seconds),
            outage="pass failed",
            logger=self.log,
            waiter=waiter,
        )

    async def run_once(self) -> RetentionReport[TableT]:
        """One pass, counted; raises what the pass raised (uncounted in `deleted`)."""
        try:
            report = await self.prune_once(self.clock())
        except Exception:
            if self.failures is not None:
                self.failures.inc()
            raise
        self.last_report = report
        for table, count in report.deleted.items():
            self.deleted.labels(table=table.value).inc(count)
        if self.last_success is not None:
            self.last_success.set(self.clock().timestamp())
        if report.total:
            self.log.info(
                "retention: deleted %s%s",
                {t.value: n for t, n in report.deleted.items()},
                " (backlog remains)" if report.more else "",
            )
        return report

    async def step(self) -> float:
        """One pass; returns the pause before the next one."""
        report = await self.run_once()
        if report.more:
            return min(BACKLOG_PAUSE_SECONDS, self.interval_seconds)
        return self.interval_seconds

    async def run(self) -> None:
        """Loop until stop() or cancellation."""
        await self.loop.run()

    def stop(self) -> None:
        self.loop.stop()
