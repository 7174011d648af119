"""Which events go to which subscription: event-type filters, matching, and the delivery id
(one per event and subscription) receivers deduplicate on."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notification.domain.subscriptions import (
    InvalidEventTypeFilter,
    delivery_id,
    matches,
    normalize_filters,
)


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
