"""The breaker: consecutive failed runs trip it; success and resume reset; skips are neutral."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain.breaker import BreakerState, after_resume, after_run_finished
from scheduler.domain.run import RunStatus

F, S, K = RunStatus.FAILED, RunStatus.SUCCEEDED, RunStatus.SKIPPED


def feed(statuses: list[RunStatus], threshold: int) -> list[bool]:
    state, trips = BreakerState(), []
    for status in statuses:
        d = after_run_finished(state, status, threshold)
        state = d.state
        trips.append(d.trip)
    return trips


def test_trips_at_threshold_consecutive_failures() -> None:
    assert feed([F, F, F], threshold=3) == [False, False, True]


def test_threshold_one_trips_on_first_failure() -> None:
    assert feed([F], threshold=1) == [True]


def test_success_resets_the_count() -> None:
    assert feed([F, F, S, F, F], threshold=3) == [False] * 5


def test_skipped_neither_counts_nor_resets() -> None:
    assert feed([F, K, F, K, K, F], threshold=3) == [False] * 5 + [True]


def test_resume_resets() -> None:
    d = after_run_finished(BreakerState(4), F, threshold=5)
    assert d.trip
    assert d.consecutive_failures == 5
    state = after_resume()
    assert after_run_finished(state, F, threshold=5) == after_run_finished(BreakerState(), F, 5)
    assert not after_run_finished(state, F, threshold=5).trip


def test_failure_after_tripping_still_reports_trip() -> None:
    # A straggler run finishing after the pause: the service layer pauses only if still active.
    assert feed([F, F, F], threshold=2) == [False, True, True]


@pytest.mark.parametrize("status", [RunStatus.PENDING, RunStatus.IN_PROGRESS, RunStatus.RETRYING])
def test_unfinished_runs_are_refused(status: RunStatus) -> None:
    with pytest.raises(ValueError):
        after_run_finished(BreakerState(), status, threshold=3)


@pytest.mark.parametrize("threshold", [0, 1001])
def test_threshold_out_of_bounds_is_refused(threshold: int) -> None:
    with pytest.raises(ValueError):
        after_run_finished(BreakerState(), F, threshold)


def test_count_is_capped() -> None:
    d = after_run_finished(BreakerState(1000), F, threshold=1000)
    assert d.trip
    assert d.consecutive_failures == 1000


@settings(max_examples=200)
@given(
    st.lists(st.sampled_from([F, S, K]), max_size=60),
    st.integers(min_value=1, max_value=10),
)
def test_trip_iff_threshold_failures_since_last_success(
    statuses: list[RunStatus], threshold: int
) -> None:
    trips = feed(statuses, threshold)
    for i, status in enumerate(statuses):
        since_success = [s for s in statuses[: i + 1] if s is not K]
        run = 0
        for s in reversed(since_success):
            if s is not F:
                break
            run += 1
        assert trips[i] == (status is F and run >= threshold)
