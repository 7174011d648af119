"""The pure projection and quota rules of domain/tenant.py."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain.tenant import (
    DEFAULT_ENTITLEMENTS,
    Entitlements,
    EntitlementsRecord,
    InvalidLimits,
    QuotaViolation,
    ScheduleUsage,
    SuspensionState,
    apply_entitlements_event,
    apply_suspension_event,
    check_min_interval,
    check_payload_bytes,
    check_schedule_count,
    over_limit,
    parse_limits,
    payload_bytes,
    quota_day,
)

T = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def fold(events: list[tuple[bool, datetime, str]]) -> SuspensionState | None:
    state: SuspensionState | None = None
    for suspended, at, eid in events:
        new = apply_suspension_event(state, suspended=suspended, time=at, event_id=eid)
        state = new or state
    return state


def test_older_event_never_overrides_newer() -> None:
    newer = apply_suspension_event(None, suspended=False, time=T, event_id="e2")
    assert (
        apply_suspension_event(newer, suspended=True, time=T - timedelta(1), event_id="e1") is None
    )


def test_duplicate_changes_nothing_and_tie_prefers_suspension() -> None:
    s = apply_suspension_event(None, suspended=True, time=T, event_id="e1")
    assert apply_suspension_event(s, suspended=True, time=T, event_id="e1") is None
    r = apply_suspension_event(None, suspended=False, time=T, event_id="r")
    tie = apply_suspension_event(r, suspended=True, time=T, event_id="s")
    assert tie is not None
    assert tie.suspended
    assert apply_suspension_event(s, suspended=False, time=T, event_id="r") is None


def test_suspended_at_is_judged_on_the_interval() -> None:
    s = fold([(True, T, "s"), (False, T + timedelta(hours=1), "r")])
    assert s is not None
    assert not s.is_suspended_at(T - timedelta(seconds=1))
    assert s.is_suspended_at(T)
    assert s.is_suspended_at(T + timedelta(minutes=59))
    assert not s.is_suspended_at(T + timedelta(hours=1))  # reinstated at that instant
    # Still suspended: everything from the start on.
    s2 = fold([(True, T, "s"), (True, T + timedelta(hours=2), "s2")])
    assert s2 is not None
    assert s2.suspended_since == T
    assert s2.is_suspended_at(T + timedelta(days=30))


_times = st.integers(min_value=0, max_value=20).map(lambda m: T + timedelta(minutes=m))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), _times), min_size=1, max_size=6))
def test_status_is_the_newest_event_whatever_the_arrival_order(
    raw: list[tuple[bool, datetime]],
) -> None:
    events = [(s, t, f"e{i}") for i, (s, t) in enumerate(raw)]
    newest_time = max(t for _, t, _ in events)
    # At the newest instant, suspension wins a tie.
    expected = any(s for s, t, _ in events if t == newest_time)
    for order in itertools.islice(itertools.permutations(events), 24):
        state = fold(list(order))
        assert state is not None
        assert (state.suspended, state.status_time) == (expected, newest_time)
        # Redelivering everything again changes nothing.
        assert fold([*order, *order]) == state


def test_partial_limits_keep_defaults_and_unknown_keys_are_ignored() -> None:
    limits = parse_limits({"max_schedules": 5, "seats": 9})
    assert limits == {"max_schedules": 5}
    ent = EntitlementsRecord(limits, T, "e").effective(DEFAULT_ENTITLEMENTS)
    assert ent == Entitlements(max_schedules=5)
    # Configured defaults fill what the event omits.
    custom = Entitlements(max_runs_per_day=7)
    assert EntitlementsRecord(limits, T, "e").effective(custom).max_runs_per_day == 7


@pytest.mark.parametrize(
    "raw", [{"max_schedules": -1}, {"max_schedules": True}, {"max_payload_bytes": "9"}, [1], None]
)
def test_invalid_limits_are_refused(raw: object) -> None:
    with pytest.raises(InvalidLimits):
        parse_limits(raw)


def test_entitlements_newest_wins_ties_by_id() -> None:
    a = apply_entitlements_event(None, limits={"max_schedules": 1}, time=T, event_id="b")
    assert a is not None
    assert apply_entitlements_event(a, limits={}, time=T - timedelta(1), event_id="z") is None
    assert apply_entitlements_event(a, limits={}, time=T, event_id="a") is None
    later = apply_entitlements_event(a, limits={}, time=T, event_id="c")
    assert later is not None
    assert later.limits == {}


def test_checks_name_key_limit_and_current() -> None:
    ent = Entitlements(max_schedules=2, min_interval_seconds=300, max_payload_bytes=10)
    assert check_schedule_count(ent, 2) is None
    assert check_schedule_count(ent, 3) == QuotaViolation("max_schedules", 2, 3)
    assert check_min_interval(ent, 60) == QuotaViolation("min_interval_seconds", 300, 60)
    assert check_min_interval(ent, 300) is None
    size = payload_bytes({"k": "éé"})  # UTF-8 bytes, not characters
    assert size == len('{"k":"éé"}'.encode())
    assert check_payload_bytes(ent, size) == QuotaViolation("max_payload_bytes", 10, size)


def test_quota_day_is_the_utc_calendar_day() -> None:
    start, end = quota_day(datetime(2026, 3, 2, 23, 30, tzinfo=UTC) + timedelta(hours=1))
    assert start == datetime(2026, 3, 3, tzinfo=UTC)
    assert end - start == timedelta(days=1)


def test_downgrade_pauses_the_newest_active_beyond_the_limit() -> None:
    def u(i: int, active: bool = True, interval: int | None = None, size: int = 2) -> ScheduleUsage:
        return ScheduleUsage(f"s{i}", T + timedelta(minutes=i), active, size, interval)

    live = [u(4), u(0), u(1, active=False), u(2), u(3)]  # arrival order does not matter
    out = over_limit(Entitlements(max_schedules=3), live)
    # s0..s2 are the oldest three (s1 paused already counts); s3, s4 are over.
    assert set(out) == {"s3", "s4"}
    assert out["s3"] == QuotaViolation("max_schedules", 3, 5)
    ent = Entitlements(min_interval_seconds=300, max_payload_bytes=5)
    out = over_limit(ent, [u(0, interval=60), u(1, interval=600, size=9), u(2, interval=600)])
    assert out == {
        "s0": QuotaViolation("min_interval_seconds", 300, 60),
        "s1": QuotaViolation("max_payload_bytes", 5, 9),
    }
