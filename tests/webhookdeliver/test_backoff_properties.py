"""BackoffPolicy properties: a monotone cap, full jitter within it, exhaustion by count and time."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhookdeliver import BackoffPolicy

policies = st.builds(
    BackoffPolicy,
    initial_seconds=st.floats(min_value=0.01, max_value=60),
    max_seconds=st.floats(min_value=60, max_value=86_400),
    multiplier=st.floats(min_value=1.0, max_value=10),
    max_attempts=st.integers(min_value=1, max_value=50),
    max_elapsed_seconds=st.floats(min_value=0, max_value=10**6),
)


@settings(max_examples=100, deadline=None)
@given(policy=policies, attempt=st.integers(min_value=1, max_value=10_000))
def test_ceiling_is_monotone_and_capped(policy, attempt):
    assert policy.initial_seconds <= policy.ceiling(attempt) <= policy.max_seconds
    assert policy.ceiling(attempt) <= policy.ceiling(attempt + 1)
    assert policy.ceiling(1) == policy.initial_seconds


@settings(max_examples=100, deadline=None)
@given(policy=policies, attempt=st.integers(min_value=1, max_value=60), seed=st.integers())
def test_full_jitter_within_bounds(policy, attempt, seed):
    delay = policy.next_delay(attempt, 0.0, rng=random.Random(seed))
    if attempt >= policy.max_attempts or (delay is None):
        assert attempt >= policy.max_attempts or policy.max_elapsed_seconds < policy.ceiling(
            attempt
        )
        return
    assert 0.0 <= delay <= policy.ceiling(attempt)


def test_jitter_spreads_over_the_whole_window():
    policy = BackoffPolicy(
        initial_seconds=1, max_seconds=100, multiplier=2, max_attempts=20, max_elapsed_seconds=10**6
    )
    rng = random.Random(7)
    delays = [policy.next_delay(5, 0.0, rng=rng) for _ in range(2000)]
    assert all(d is not None and 0 <= d <= 16 for d in delays)
    assert min(delays) < 1
    assert max(delays) > 15


@settings(max_examples=100, deadline=None)
@given(policy=policies, seed=st.integers())
def test_exhausted_after_max_attempts(policy, seed):
    rng = random.Random(seed)
    assert policy.next_delay(policy.max_attempts, 0.0, rng=rng) is None
    assert policy.next_delay(policy.max_attempts + 5, 0.0, rng=rng) is None


@settings(max_examples=100, deadline=None)
@given(
    policy=policies,
    attempt=st.integers(min_value=1, max_value=49),
    elapsed=st.floats(min_value=0, max_value=2 * 10**6),
    seed=st.integers(),
)
def test_never_schedules_past_max_elapsed(policy, attempt, elapsed, seed):
    delay = policy.next_delay(attempt, elapsed, rng=random.Random(seed))
    if delay is not None:
        assert elapsed + delay <= policy.max_elapsed_seconds
    if elapsed > policy.max_elapsed_seconds:
        assert delay is None


@settings(max_examples=100, deadline=None)
@given(policy=policies, retry_after=st.floats(min_value=0, max_value=10**6), seed=st.integers())
def test_retry_after_is_a_floor_capped_at_max_seconds(policy, retry_after, seed):
    delay = policy.next_delay(1, 0.0, retry_after=retry_after, rng=random.Random(seed))
    if policy.max_attempts == 1:
        assert delay is None
        return
    if delay is not None:
        assert delay >= min(retry_after, policy.max_seconds)
        assert delay <= max(policy.max_seconds, policy.ceiling(1))


def test_worked_example():
    policy = BackoffPolicy(
        initial_seconds=2, max_seconds=60, multiplier=3, max_attempts=5, max_elapsed_seconds=300
    )
    assert [policy.ceiling(n) for n in range(1, 7)] == [2, 6, 18, 54, 60, 60]
    assert policy.ceiling(10**9) == 60  # no float overflow


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(initial_seconds=0),
        dict(initial_seconds=10, max_seconds=5),
        dict(multiplier=0.5),
        dict(max_attempts=0),
        dict(max_elapsed_seconds=-1),
        dict(max_seconds=float("inf")),
    ],
)
def test_invalid_policies_are_refused(kwargs):
    with pytest.raises(ValueError):
        BackoffPolicy(**kwargs)
