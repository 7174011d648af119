"""The pure timing rules (domain/timing.py) and max_runs in planning (domain/planning.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.domain.planning import PlanState, plan_occurrences
from scheduler.domain.policies import MisfirePolicy
from scheduler.domain.run import RunStatus
from scheduler.domain.timing import InvalidTiming, Timing, check_timing, jitter_offset
from tests.scheduler.definitions import timing_with

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_bounds_are_inclusive_and_limit_the_sequence() -> None:
    timing = timing_with(
        timezone="UTC",
        cron="0 * * * *",
        start_at=datetime(2026, 3, 1, 14, 0, tzinfo=UTC),
        end_at=datetime(2026, 3, 1, 17, 0, tzinfo=UTC),
    ).compile()
    got = [o.astimezone(UTC).hour for o in timing.iter_after(NOW)]
    assert got == [14, 15, 16, 17]
    assert timing.next_after(datetime(2026, 3, 1, 17, 0, tzinfo=UTC)) is None


def test_a_fractional_start_at_starts_at_the_next_whole_occurrence() -> None:
    timing = timing_with(
        timezone="UTC", cron="* * * * *", start_at=datetime(2026, 3, 1, 14, 0, 0, 500, tzinfo=UTC)
    ).compile()
    assert timing.next_after(NOW) == datetime(2026, 3, 1, 14, 1, tzinfo=UTC)


def test_max_runs_counts_what_was_planned_before() -> None:
    timing = timing_with(timezone="UTC", cron="0 * * * *", max_runs=3).compile()
    assert len(list(timing.iter_after(NOW))) == 3
    assert len(list(timing.iter_after(NOW, planned_runs=2))) == 1
    assert timing.next_after(NOW, planned_runs=3) is None


def test_one_shot_has_one_whole_second_occurrence_and_a_short_past_grace() -> None:
    run_at = datetime(2026, 3, 1, 11, 59, 30, 250_000, tzinfo=UTC)
    timing = timing_with(cron=None, timezone="Europe/Paris", run_at=run_at).compile()
    first = timing.first_after(NOW)
    assert first is not None
    assert first.astimezone(UTC) == run_at.replace(microsecond=0)
    assert first.utcoffset() == timedelta(hours=1)  # in the schedule's zone
    assert timing.next_after(NOW) is None  # strictly after now: already past
    assert timing.min_interval_seconds() is None


@given(
    st.text(min_size=1, max_size=30),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
    st.integers(0, 3600),
)
def test_jitter_offset_is_deterministic_and_in_range(
    schedule_id: str, when: datetime, jitter: int
) -> None:
    instant = when.replace(tzinfo=UTC, microsecond=0)
    offset = jitter_offset(schedule_id, instant, jitter)
    assert 0 <= offset <= jitter
    # The same instant in another zone is the same occurrence: the same offset.
    assert (
        jitter_offset(schedule_id, instant.astimezone(datetime.now().astimezone().tzinfo), jitter)
        == offset
    )


def test_jitter_offsets_spread_over_the_window() -> None:
    offsets = {jitter_offset("sch_1", NOW + timedelta(hours=h), 60) for h in range(500)}
    assert len(offsets) > 50  # not a constant, not a handful of values


@pytest.mark.parametrize(
    ("timing", "field"),
    [
        (timing_with(cron=None, timezone="UTC"), "cron"),
        (timing_with(timezone="UTC", cron="* * * * *", run_at=NOW), "cron"),
        (timing_with(timezone="UTC", cron="*/10 * * * *", jitter_seconds=600), "jitter_seconds"),
        (
            timing_with(
                cron=None, timezone="UTC", run_at=NOW + timedelta(hours=1), jitter_seconds=3601
            ),
            "jitter_seconds",
        ),
        (timing_with(timezone="UTC", cron="* * * * *", max_runs=0), "max_runs"),
        (timing_with(timezone="UTC", cron="* * * * *", start_at=datetime(2026, 3, 2)), "start_at"),
        (timing_with(cron=None, timezone="UTC", run_at=NOW - timedelta(seconds=61)), "run_at"),
        (
            timing_with(
                cron=None,
                timezone="UTC",
                run_at=NOW + timedelta(hours=2),
                end_at=NOW + timedelta(hours=1),
            ),
            "run_at",
        ),
    ],
)
def test_check_timing_names_the_field(timing: Timing, field: str) -> None:
    with pytest.raises(InvalidTiming) as caught:
        check_timing(timing, NOW)
    assert caught.value.field == field


def test_jitter_just_under_the_smallest_gap_is_allowed() -> None:
    check_timing(timing_with(timezone="UTC", cron="*/10 * * * *", jitter_seconds=599), NOW)


def test_planning_stops_at_max_runs_and_leaves_no_next_run() -> None:
    timing = timing_with(timezone="UTC", cron="* * * * *").compile()
    state = PlanState(
        next_run_at=NOW - timedelta(minutes=10),
        misfire_policy=MisfirePolicy.FIRE_ALL,
        runs_left=4,
    )
    decision = plan_occurrences(state, now=NOW, next_after=timing.next_after)
    assert len(decision.occurrences) == 4
    assert all(o.status is RunStatus.PENDING for o in decision.occurrences)
    assert decision.next_run_at is None
    assert not decision.more_due
    spent = PlanState(next_run_at=NOW, misfire_policy=MisfirePolicy.FIRE_ALL, runs_left=0)
    nothing = plan_occurrences(spent, now=NOW, next_after=timing.next_after)
    assert (nothing.occurrences, nothing.next_run_at) == ((), None)
