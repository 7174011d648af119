"""What a timing change (PATCH of a TIMING_FIELDS field) does to the runs planned ahead under the
old timing (DESIGN.md §7a). Pure.

The planner materialises occurrences up to its look-ahead before they are due, so when the
timing changes some never-attempted runs may already wait for instants the new timing does not
produce. `retime` keeps those that are the new timing's next occurrences, in order, and drops the
rest (the caller deletes them: never attempted, they have no attempt or event, and deleting frees
their occurrence's unique key, so a later timing that produces the instant again can plan it);
`next_run_at` is the new timing's first occurrence not kept. A dropped instant that the new
timing produces later than a missing one is simply planned again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduler.domain.timing import CompiledTiming


@dataclass(frozen=True)
class Retime:
    keep: tuple[datetime, ...]
    """Runs planned ahead that stay (UTC, increasing)."""
    drop: tuple[datetime, ...]
    """Runs planned ahead that go (UTC, increasing)."""
    next_run_at: datetime | None
    """The new timing's first occurrence after the kept ones (None: none left)."""


def retime(
    timing: CompiledTiming, now: datetime, *, counted_runs: int, ahead: Iterable[datetime]
) -> Retime:
    """`ahead`: the scheduled_for of never-attempted planned runs after `now`;
    `counted_runs`: the occurrences planned before that stay counted for max_runs (the
    schedule's planned_runs without `ahead`)."""
    waiting = {t.astimezone(UTC) for t in ahead}
    keep: list[datetime] = []
    next_run_at: datetime | None = None
    for occurrence in timing.iter_from(now, counted_runs):
        utc = occurrence.astimezone(UTC)
        if utc not in waiting:
            next_run_at = occurrence
            break
        keep.append(utc)
    drop = tuple(sorted(waiting.difference(keep)))
    return Retime(tuple(keep), drop, next_run_at)
