"""Flow control's pure rules (servicekit.flow): destination syntax, policy bounds, holds, AIMD,
the token bucket and the admission of a claim."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servicekit.flow import (
    ADAPTIVE_TTL_SECONDS,
    MAX_HOLD_SECONDS,
    NO_STATE,
    DestinationPolicy,
    FlowState,
    Signal,
    admit,
    effective_rate,
    observed_rate,
    parse_destination,
    react,
    signal_of,
    tenant_policy,
    worst,
)

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("API.Example.com:443", "api.example.com:443"),
        ("localhost:8080", "localhost:8080"),
        ("127.0.0.1:80", "127.0.0.1:80"),
        ("[::1]:9000", "[::1]:9000"),
        ("bücher.example:443", "xn--bcher-kva.example:443"),
        ("a.example.:80", "a.example:80"),
    ],
)
def test_destinations_are_canonical(text: str, canonical: str) -> None:
    assert parse_destination(text) == canonical


@pytest.mark.parametrize(
    "text",
    [
        "",
        "example.com",
        ":443",
        "example.com:0",
        "example.com:65536",
        "example.com:08",
        "exa mple.com:80",
        "-bad.com:80",
        "[::1:80",
        "[zz]:80",
        "a..b:80",
        " a.com:80",
        "example.com:+80",
        "x" * 300 + ":80",
    ],
)
def test_bad_destinations_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_destination(text)


def test_policy_bounds() -> None:
    tenant_policy(1, 0.1)
    tenant_policy(100, 1000)
    DestinationPolicy(128)  # an operator's default may be higher than a tenant's
    for bad in ((0, None), (101, None), (10, 0.05), (10, 1000.5), (10, float("nan"))):
        with pytest.raises(ValueError):
            tenant_policy(*bad)


def test_signals() -> None:
    assert signal_of(200, None) is Signal.FINE
    assert signal_of(429, None) is Signal.SLOW_DOWN
    assert signal_of(429, 5.0) is Signal.SLOW_DOWN_AND_HOLD
    assert signal_of(503, 5.0) is Signal.HOLD
    assert signal_of(503, None) is None
    assert signal_of(500, 3.0) is None
    assert signal_of(None, None) is None
    assert worst([Signal.FINE, Signal.SLOW_DOWN]) is Signal.SLOW_DOWN
    assert worst([Signal.FINE, Signal.HOLD, Signal.SLOW_DOWN]) is Signal.HOLD
    assert worst([]) is None


def test_retry_after_holds_capped_and_never_shortened() -> None:
    policy = DestinationPolicy()
    s = react(NO_STATE, policy, Signal.HOLD, T0, retry_after_seconds=30)
    assert s.held_until == at(30)
    assert s.current_rate is None
    s = react(s, policy, Signal.HOLD, at(1), retry_after_seconds=5)
    assert s.held_until == at(30)
    s = react(s, policy, Signal.HOLD, at(2), retry_after_seconds=86_400)
    assert s.held_until == at(2 + MAX_HOLD_SECONDS)
    assert s.held(at(100))
    assert not s.held(at(2 + MAX_HOLD_SECONDS))
    assert s.live(at(2 + MAX_HOLD_SECONDS)).held_until is None


def test_429_halves_from_policy_then_current_then_observed() -> None:
    with_rate = DestinationPolicy(10, 40)
    s = react(NO_STATE, with_rate, Signal.SLOW_DOWN, T0, observed=400)
    assert s.current_rate == 20
    s = react(s, with_rate, Signal.SLOW_DOWN, at(1))
    assert s.current_rate == 10
    s = react(NO_STATE, DestinationPolicy(), Signal.SLOW_DOWN, T0, observed=30)
    assert s.current_rate == 15
    s = react(
        NO_STATE,
        DestinationPolicy(),
        Signal.SLOW_DOWN_AND_HOLD,
        T0,
        retry_after_seconds=2,
        observed=30,
    )
    assert s.current_rate == 15
    assert s.held_until == at(2)


def test_fine_answers_recover_additively_and_state_expires() -> None:
    policy = DestinationPolicy(10, 20)
    s = react(NO_STATE, policy, Signal.SLOW_DOWN, T0)
    assert s.current_rate == 10
    assert s.cut_from is None  # a first cut: no limit known, the climb is slow
    s = react(s, policy, Signal.FINE, at(3))
    assert s.current_rate == pytest.approx(16)  # +10% of the tenant's 20/s per second
    s = react(s, policy, Signal.FINE, at(20))  # reached the policy's rate: adaptive dropped
    assert s.current_rate is None
    assert s.empty
    free = DestinationPolicy()
    s = react(NO_STATE, free, Signal.SLOW_DOWN, T0, observed=8)
    assert s.current_rate == 4
    assert s.live(at(ADAPTIVE_TTL_SECONDS + 1)).current_rate is None
    assert effective_rate(free, s) == 4
    assert effective_rate(policy, FlowState(current_rate=50)) == 20


def test_after_a_429_while_probing_the_rate_climbs_back_fast_then_probes() -> None:
    free = DestinationPolicy()
    s = react(NO_STATE, free, Signal.SLOW_DOWN, T0, observed=40)
    assert (s.current_rate, s.cut_from) == (20, None)  # an observed burst is no limit
    s = react(s, free, Signal.FINE, at(5))
    assert s.current_rate == pytest.approx(25)  # probing at 1/s
    s = react(s, free, Signal.SLOW_DOWN, at(6))  # a 429 while probing: the limit is 25
    assert (s.current_rate, s.cut_from) == (pytest.approx(12.5), pytest.approx(25))
    assert react(s, free, Signal.SLOW_DOWN, at(6.5)) == s  # within the cut guard
    climbing = react(s, free, Signal.FINE, at(6.5))
    assert climbing.current_rate == pytest.approx(18.75)  # fast: half of 25 per second
    s = react(climbing, free, Signal.FINE, at(7.5))
    # fast up to 80% of 25 (0.1 s), then 1/s (0.9 s)
    assert s.current_rate == pytest.approx(20.9)
    # A cut during the fast climb says only "less": the climb after it is slow.
    again = react(climbing, free, Signal.SLOW_DOWN, at(7.2))
    assert (again.current_rate, again.cut_from) == (pytest.approx(9.375), None)
    assert react(again, free, Signal.FINE, at(9.2)).current_rate == pytest.approx(11.375)
    # A state written before cut_from existed grows back slowly, as it did.
    old = FlowState(current_rate=10, rate_at=T0, cut_at=T0)
    assert react(old, free, Signal.FINE, at(2)).current_rate == pytest.approx(12)
    expired = s.live(at(6 + ADAPTIVE_TTL_SECONDS + 1))
    assert (expired.current_rate, expired.cut_from) == (None, None)


def test_observed_rate_is_bounded() -> None:
    assert observed_rate([T0] * 50) == 50  # a burst: over one second at least
    assert observed_rate([T0, at(10)]) == pytest.approx(0.2)
    assert observed_rate([]) == 0.1


def test_admit_in_flight_without_rate() -> None:
    policy = DestinationPolicy(max_in_flight=10)
    a = admit(policy, NO_STATE, T0, in_flight=7, wanted=5)
    assert a.granted == 3
    assert len(a.due_again) == 2
    assert all(t > T0 for t in a.due_again)
    a = admit(policy, NO_STATE, T0, in_flight=12, wanted=5)
    assert a.granted == 0


def test_admit_held() -> None:
    s = FlowState(held_until=at(30))
    a = admit(DestinationPolicy(), s, T0, in_flight=0, wanted=3)
    assert a.granted == 0
    assert a.due_again == [at(30)] * 3
    assert admit(DestinationPolicy(), s, at(30), in_flight=0, wanted=3).granted == 3


def test_admit_paces_with_tokens() -> None:
    policy = DestinationPolicy(max_in_flight=100, per_second=10)
    a = admit(policy, NO_STATE, T0, in_flight=0, wanted=25)
    assert a.granted == 10  # a full bucket: one second's worth
    # The deferred are due one token apart.
    assert a.due_again[0] == at(0.1)
    assert a.due_again[9] == at(1.0)
    b = admit(policy, a.state, at(0.5), in_flight=0, wanted=25)
    assert b.granted == 5


@settings(max_examples=200, deadline=None)
@given(
    max_in_flight=st.integers(1, 100),
    per_second=st.one_of(st.none(), st.floats(0.1, 1000)),
    steps=st.lists(
        st.tuples(st.floats(0, 5), st.integers(0, 200), st.integers(0, 150)),
        min_size=1,
        max_size=30,
    ),
)
def test_admission_never_exceeds_limits(
    max_in_flight: int, per_second: float | None, steps: list[tuple[float, int, int]]
) -> None:
    """Whatever the timing: never more in flight than the limit, never more starts than the
    bucket allows (burst + rate x elapsed), and every deferred run is due later."""
    policy = DestinationPolicy(max_in_flight, per_second)
    state, now, started = NO_STATE, T0, 0
    for dt, wanted, in_flight in steps:
        now += timedelta(seconds=dt)
        a = admit(policy, state, now, in_flight=in_flight, wanted=wanted)
        assert 0 <= a.granted <= wanted
        assert in_flight + a.granted <= max(max_in_flight, in_flight)
        assert a.granted == 0 or in_flight + a.granted <= max_in_flight
        assert len(a.due_again) == wanted - a.granted
        assert all(t > now for t in a.due_again)
        started += a.granted
        state = a.state
        if per_second is not None:
            elapsed = (now - T0).total_seconds()
            assert started <= max(1.0, per_second) + per_second * elapsed + 1e-6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(list(Signal)), max_size=40), st.floats(0.1, 1000))
def test_adaptive_rate_stays_in_bounds(signals: list[Signal], observed: float) -> None:
    policy = DestinationPolicy(10, 50)
    s = NO_STATE
    for i, sig in enumerate(signals):
        s = react(s, policy, sig, at(i), retry_after_seconds=10, observed=observed)
        if s.current_rate is not None:
            assert 0.1 <= s.current_rate < 50
        if s.held_until is not None:
            assert s.held_until <= at(i) + timedelta(seconds=MAX_HOLD_SECONDS)


def test_admit_says_which_deferred_runs_wait_for_a_slot() -> None:
    policy = DestinationPolicy(max_in_flight=2)
    a = admit(policy, NO_STATE, T0, in_flight=0, wanted=6)
    assert a.granted == 2
    assert a.for_slot == [True] * 4
    # Turns come about one attempt's duration apart (the limit's worth per turn), bounded.
    a = admit(policy, NO_STATE, T0, in_flight=0, wanted=6, slot_seconds=0.5)
    assert a.due_again == [at(0.5), at(0.5), at(1.0), at(1.0)]
    a = admit(policy, NO_STATE, T0, in_flight=0, wanted=6, slot_seconds=60)
    assert a.due_again == [at(2.0)] * 4
    # Waiting for a token (not a slot) or for a hold's end: not a slot waiter.
    paced = admit(DestinationPolicy(100, 1.0), NO_STATE, T0, in_flight=0, wanted=3)
    assert paced.granted == 1
    assert paced.for_slot == [False, False]
    held = admit(policy, FlowState(held_until=at(9)), T0, in_flight=0, wanted=2)
    assert held.for_slot == [False, False]


def test_reserved_tokens_queue_the_next_claims_behind_the_first() -> None:
    """Deferred runs take their tokens now (the bucket in debt), so a second claim's runs are
    due after the first's, not at the same instants; a reserved run needs a slot only."""
    policy = DestinationPolicy(max_in_flight=100, per_second=10)
    a = admit(policy, NO_STATE, T0, in_flight=0, wanted=15, reserve=True)
    assert a.granted == 10
    assert a.due_again == [at(0.1 * k) for k in range(1, 6)]
    assert a.reserved == a.due_again
    b = admit(policy, a.state, T0, in_flight=0, wanted=5, reserve=True)
    assert b.granted == 0
    assert b.due_again == [at(0.1 * k) for k in range(6, 11)]
    # At its instant a reserved run goes (prepaid), with no token of the bucket's.
    c = admit(policy, b.state, at(0.1), in_flight=0, wanted=2, prepaid=1, reserve=True)
    assert c.granted == 1
    assert c.due_again == [at(1.1)]
    # Starts plus reservations never outrun the rate: 10 (burst) + 10/s x 0.1 s + 1 more.
    assert c.state.tokens == pytest.approx(-10.0)


def test_one_cut_per_second_and_deferrals_come_back_within_bounds() -> None:
    s = react(NO_STATE, DestinationPolicy(), Signal.SLOW_DOWN, T0, observed=40)
    assert s.current_rate == 20
    # The 429s of requests sent before the cut do not cut again.
    assert react(s, DestinationPolicy(), Signal.SLOW_DOWN, at(0.5)).current_rate == 20
    assert react(s, DestinationPolicy(), Signal.SLOW_DOWN, at(1)).current_rate == 10
    # At a collapsed rate, runs beyond the reserved window come back within ~10 s.
    slow = FlowState(current_rate=0.1, rate_at=T0, cut_at=T0)
    a = admit(DestinationPolicy(), slow, T0, in_flight=0, wanted=50, reserve=True)
    assert a.granted == 1
    assert all(t <= at(11) for t in a.due_again[1:])


def test_a_cut_or_a_hold_voids_the_reserved_tokens() -> None:
    free = DestinationPolicy()
    # 24/s with 2 s of tokens reserved ahead: the bucket owes 48.
    s = FlowState(current_rate=24, rate_at=T0, cut_at=T0, cut_from=48, tokens=-48, tokens_at=at(5))
    cut = react(s, free, Signal.SLOW_DOWN, at(5))
    assert cut.current_rate == 12
    assert (cut.tokens, cut.tokens_at) == (0, at(5))  # restarts empty at the new rate
    assert admit(free, cut, at(5.05), in_flight=0, wanted=1).granted == 0
    assert admit(free, cut, at(5.1), in_flight=0, wanted=1).granted == 1
    full = react(replace(s, tokens=20), free, Signal.SLOW_DOWN, at(5))
    assert full.tokens == 12  # a burst of the new rate at most
    # A hold: the bucket restarts at its end with one token, so what it held is paced.
    held = react(s, free, Signal.HOLD, at(5), retry_after_seconds=10)
    assert (held.tokens, held.tokens_at) == (1, at(15))
    assert admit(free, held, at(14.9), in_flight=0, wanted=30).granted == 0  # held
    assert admit(free, held, at(15), in_flight=0, wanted=30).granted == 1
    a = admit(free, held, at(16), in_flight=0, wanted=30)
    assert a.granted == 10  # 1 s of the 24/s bucket, capped by the 10 in flight
