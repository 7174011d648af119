"""The one backoff formula (servicekit.runtime.backoff): the delay stays within [0, cap], the
ceiling never decreases, and both users (webhook retries, worker loops) compute exactly it."""

from __future__ import annotations

import math
import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from servicekit.runtime.backoff import backoff_ceiling, jittered
from servicekit.runtime.worker import Backoff
from webhookdeliver import BackoffPolicy

initials = st.floats(min_value=0.001, max_value=3600)
caps = st.floats(min_value=0.001, max_value=10**7)
multipliers = st.floats(min_value=1.0, max_value=100)
attempts = st.integers(min_value=1, max_value=10**6)


@settings(max_examples=300, deadline=None)
@given(
    initial=initials,
    cap=caps,
    multiplier=multipliers,
    attempt=attempts,
    seed=st.integers(),
    floor=st.sampled_from([0.0, 0.5]),
)
@example(initial=1.0, cap=8.0, multiplier=2.0, attempt=10**6, seed=0, floor=0.0)
@example(initial=5.0, cap=5.0, multiplier=1.0, attempt=1, seed=0, floor=0.5)
def test_delay_is_within_zero_and_the_cap_and_the_ceiling_never_decreases(
    initial: float, cap: float, multiplier: float, attempt: int, seed: int, floor: float
) -> None:
    initial = min(initial, cap)
    ceiling = backoff_ceiling(
        attempt, initial_seconds=initial, max_seconds=cap, multiplier=multiplier
    )
    following = backoff_ceiling(
        attempt + 1, initial_seconds=initial, max_seconds=cap, multiplier=multiplier
    )
    assert initial <= ceiling <= following <= cap
    delay = jittered(ceiling, random.Random(seed), floor=floor)
    assert 0.0 <= floor * ceiling <= delay <= ceiling <= cap


@settings(max_examples=200, deadline=None)
@given(initial=initials, cap=caps, multiplier=multipliers, exponent=st.integers(0, 60))
def test_ceiling_is_the_capped_exponential(
    initial: float, cap: float, multiplier: float, exponent: int
) -> None:
    initial = min(initial, cap)
    direct = min(cap, initial * multiplier**exponent)
    got = backoff_ceiling(
        exponent + 1, initial_seconds=initial, max_seconds=cap, multiplier=multiplier
    )
    assert math.isclose(got, direct, rel_tol=1e-12)


@settings(max_examples=100, deadline=None)
@given(initial=initials, cap=caps, multiplier=multipliers, attempt=st.integers(1, 200))
def test_both_users_share_the_ceiling(
    initial: float, cap: float, multiplier: float, attempt: int
) -> None:
    initial = min(initial, cap)
    policy = BackoffPolicy(initial_seconds=initial, max_seconds=cap, multiplier=multiplier)
    formula = backoff_ceiling(
        attempt, initial_seconds=initial, max_seconds=cap, multiplier=multiplier
    )
    assert policy.ceiling(attempt) == formula
    worker = Backoff(initial, cap)  # no rng: the ceiling itself, multiplier 2
    assert worker.delay(attempt) == backoff_ceiling(
        attempt, initial_seconds=initial, max_seconds=cap
    )
