"""Which events go to which subscription: event-type filters, matching, and the delivery id
(one per event and subscription) receivers deduplicate on."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventbus.catalogue import SCHEDULE_EVENTS_TOPIC, event_types_of
from notification.domain.subscriptions import (
    InvalidEventTypeFilter,
    delivery_id,
    matches,
    normalize_filters,
)
from servicekit.data.ids import is_id

KNOWN = event_types_of([SCHEDULE_EVENTS_TOPIC])


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
        normalize_filters([bad], known=KNOWN)


def test_filters_deduplicated_and_bounded() -> None:
    known = ["a.x", "b", *[f"t{i}" for i in range(51)]]
    assert normalize_filters(["a.*", " a.* ", "b"], known=known) == ["a.*", "b"]
    with pytest.raises(InvalidEventTypeFilter):
        normalize_filters([f"t{i}" for i in range(51)], known=known)


@pytest.mark.parametrize(
    "good", ["schedule.run.failed", "schedule.*", "schedule.run.*", "*", "schedule.triggered"]
)
def test_catalogued_types_and_patterns_over_them_accepted(good: str) -> None:
    assert normalize_filters([good], known=KNOWN) == [good]


@pytest.mark.parametrize(
    "typo", ["schedule.run.faild", "schedule.runs.*", "schedules.*", "tenant.suspended", "x.*"]
)
def test_filters_matching_no_catalogued_type_refused_with_the_valid_ones(typo: str) -> None:
    with pytest.raises(InvalidEventTypeFilter) as info:
        normalize_filters(["schedule.*", typo], known=KNOWN)
    message = str(info.value)
    assert repr(typo) in message
    assert all(t in message for t in KNOWN)


@settings(max_examples=50)
@given(st.text(min_size=1, max_size=50), st.text(min_size=1, max_size=50))
def test_delivery_id_is_stable_and_distinct(event_id: str, sub_id: str) -> None:
    assert delivery_id(event_id, sub_id) == delivery_id(event_id, sub_id)
    assert delivery_id(event_id, sub_id) != delivery_id(event_id + "x", sub_id)
    assert len(delivery_id(event_id, sub_id)) <= 40  # fits the column
    assert is_id(delivery_id(event_id, sub_id), "dlv")  # the one id style of both services
