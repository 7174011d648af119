"""Pure domain rules: filters and matching, delivery ids, alert parsing, endpoint health."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notification.domain.alerts import Channel, InvalidAlertRequest, parse_alert_request
from notification.domain.deliveries import (
    EndpointHealth,
    EndpointHealthPolicy,
    StreakChange,
    streak_changes,
)
from notification.domain.subscriptions import (
    InvalidEventTypeFilter,
    delivery_id,
    matches,
    normalize_filters,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("filters", "event_type", "expected"),
    [
        (["schedule.*"], "schedule.run.failed", True),
        (["schedule.run.*"], "schedule.paused", False),
        (["schedule.run.failed"], "schedule.run.failed", True),
        (["schedule.run.failed"], "schedule.run.failed.extra", False),
        (["*"], "tenant.suspended", True),
        (["schedule.*"], "schedules.x", False),  # prefix includes the dot
    ],
)
def test_matching(filters: list[str], event_type: str, expected: bool) -> None:
    assert matches(filters, event_type) is expected


@pytest.mark.parametrize("bad", ["sched*", "*.run", "Schedule.X", "a..b", "", " ", "a.*.b"])
def test_bad_filters_refused(bad: str) -> None:
    with pytest.raises(InvalidEventTypeFilter):
        normalize_filters([bad])


def test_filters_deduplicated_and_bounded() -> None:
    assert normalize_filters(["a.*", " a.* ", "b"]) == ["a.*", "b"]
    with pytest.raises(InvalidEventTypeFilter):
        normalize_filters([f"t{i}" for i in range(51)])


@settings(max_examples=50)
@given(st.text(min_size=1, max_size=50), st.text(min_size=1, max_size=50))
def test_delivery_id_is_stable_and_distinct(event_id: str, sub_id: str) -> None:
    assert delivery_id(event_id, sub_id) == delivery_id(event_id, sub_id)
    assert delivery_id(event_id, sub_id) != delivery_id(event_id + "x", sub_id)
    assert len(delivery_id(event_id, sub_id)) <= 40  # fits the column


def test_alert_request_shapes() -> None:
    bare = {
        "tenant_id": "t1",
        "channels": ["in_app"],
        "template": "schedule_auto_paused",
        "data": {"schedule_name": "n"},
    }
    parsed = parse_alert_request(bare, "notification-requests:0:7")
    assert parsed.id == "notification-requests:0:7"
    assert parsed.channels == frozenset({Channel.IN_APP})
    wrapped = {"id": "evt_1", "type": "x", "tenant_id": "t1", "time": "t", "data": bare}
    assert parse_alert_request(wrapped, "pos").id == "evt_1"
    defaulted = parse_alert_request({"tenant_id": "t", "template": "x"}, "p")
    assert defaulted.channels == frozenset(Channel)
    for bad in [
        [],
        {"template": "x"},
        {"tenant_id": "t", "template": "../etc"},
        {"tenant_id": "t", "template": "x", "channels": ["sms"]},
        {"tenant_id": "t", "template": "x", "data": []},
    ]:
        with pytest.raises(InvalidAlertRequest):
            parse_alert_request(bad, "p")


def test_endpoint_health_rule() -> None:
    policy = EndpointHealthPolicy(disable_after_seconds=5 * 86400, min_consecutive_failures=3)
    [two] = streak_changes([("s", False, T0 + timedelta(days=1)), ("s", False, T0)])
    h = two.applied_to(EndpointHealth(None, 0))
    assert h == EndpointHealth(T0, 2)
    assert not policy.should_disable(
        h.failing_since, h.consecutive_failures, T0 + timedelta(days=9)
    )
    [one] = streak_changes([("s", False, T0 + timedelta(days=2))])
    h = one.applied_to(h)
    assert h == EndpointHealth(T0, 3)  # adds to the streak it found
    assert not policy.should_disable(
        h.failing_since, 3, T0 + timedelta(days=5) - timedelta(seconds=1)
    )
    assert policy.should_disable(h.failing_since, 3, T0 + timedelta(days=5))
    [ok] = streak_changes([("s", True, T0 + timedelta(days=3))])
    assert ok.clears
    assert ok.applied_to(h) == EndpointHealth(None, 0)


def test_streak_change_counts_from_the_last_success_in_start_order() -> None:
    t = [T0 + timedelta(seconds=i) for i in range(4)]
    changes = streak_changes(
        [("a", False, t[3]), ("a", True, t[1]), ("a", False, t[0]), ("a", False, t[2])]
    )
    assert changes == [StreakChange("a", 2, t[2], True)]
    prior = EndpointHealth(T0 - timedelta(days=9), 40)
    assert changes[0].applied_to(prior) == EndpointHealth(t[2], 2)
    assert not changes[0].clears
