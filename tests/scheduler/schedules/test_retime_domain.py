"""domain/retime.py: the runs planned ahead that a new timing keeps (its next occurrences, in
order, within max_runs) and the next_run_at it plans from."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from scheduler.domain.retime import retime
from tests.scheduler.definitions import timing_with

NOW = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
PARIS = ZoneInfo("Europe/Paris")


def at(minute: int) -> datetime:
    return datetime(2026, 3, 1, 12, minute, tzinfo=UTC)


def test_keeps_the_prefix_the_new_timing_produces() -> None:
    every_two = timing_with(timezone="UTC", cron="*/2 * * * *").compile()
    got = retime(every_two, NOW, counted_runs=1, ahead=[at(5), at(1), at(4), at(2)])
    assert (got.keep, got.drop, got.next_run_at) == ((at(2), at(4)), (at(1), at(5)), at(6))
    # A run the new timing produces only after an instant not planned yet is planned again.
    got = retime(every_two, NOW, counted_runs=0, ahead=[at(4)])
    assert (got.keep, got.drop, got.next_run_at) == ((), (at(4),), at(2))


def test_max_runs_ends_the_kept_runs() -> None:
    limited = timing_with(timezone="UTC", cron="* * * * *", max_runs=2).compile()
    got = retime(limited, NOW, counted_runs=1, ahead=[at(1), at(2)])
    assert (got.keep, got.drop, got.next_run_at) == ((at(1),), (at(2),), None)


def test_a_one_shot_at_the_same_instant_keeps_its_run() -> None:
    once = timing_with(cron=None, timezone="Europe/Paris", run_at=at(5).astimezone(PARIS)).compile()
    got = retime(once, NOW, counted_runs=0, ahead=[at(5)])
    assert (got.keep, got.drop, got.next_run_at) == ((at(5),), (), None)
