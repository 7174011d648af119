"""The three DST policies and the annotations (DESIGN.md §7a) against the brute-force reference
(tests/scheduler/schedules/reference.py), over random expressions, zones and instants with DST
transition days over-sampled, plus Pacific/Apia's skipped day (2011-12-30)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler.domain.expression import parse_expression
from scheduler.domain.occurrences import Recurrence, format_occurrence
from scheduler.domain.policies import DstPolicy
from tests.scheduler.schedules.reference import reference_annotated
from tests.scheduler.schedules.test_occurrences_reference import (
    WINDOW,
    ZONES,
    expressions,
    instants,
    transitions,
)

POLICY_ZONES = [*ZONES, "Pacific/Apia"]
POLICIES = [p.value for p in DstPolicy]


def check(expression: str, zone_name: str, after: datetime, policy: str) -> None:
    try:
        recurrence = Recurrence.parse(expression, zone_name, DstPolicy(policy))
    except ValueError:
        return  # impossible dates are refused; covered by the expression table
    until = after + WINDOW
    expected = reference_annotated(
        parse_expression(expression), ZoneInfo(zone_name), after, until, policy
    )
    got = []
    for occurrence, annotation in recurrence.iter_annotated(after):
        if occurrence > until:
            break
        got.append((occurrence.astimezone(UTC), None if annotation is None else annotation.value))
    assert got == expected, (expression, zone_name, after, policy)
    for previous, nxt in pairwise(got):
        again = recurrence.next_after(previous[0])
        assert again is not None
        assert again.timestamp() == nxt[0].timestamp()


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime, str]:
    zone_name = draw(st.sampled_from(POLICY_ZONES))
    return draw(expressions), zone_name, draw(instants(zone_name)), draw(st.sampled_from(POLICIES))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
@example(("30 2 * * *", "America/New_York", datetime(2026, 3, 7, 12, 0, tzinfo=UTC), "skip"))
@example(("30 1 * * *", "America/New_York", datetime(2026, 10, 31, 12, 0, tzinfo=UTC), "literal"))
@example(("15 2 * * *", "Australia/Lord_Howe", datetime(2026, 10, 3, 12, 0, tzinfo=UTC), "skip"))
@example(("45 1 * * *", "Australia/Lord_Howe", datetime(2026, 4, 4, 12, 0, tzinfo=UTC), "literal"))
@example(("0 12 * * *", "Pacific/Apia", datetime(2011, 12, 29, 0, 0, tzinfo=UTC), "shift"))
@example(("0 12 * * *", "Pacific/Apia", datetime(2011, 12, 29, 0, 0, tzinfo=UTC), "skip"))
@example(("0 2,3 * * *", "America/New_York", datetime(2026, 3, 8, 1, 0, tzinfo=UTC), "shift"))
def test_policies_match_reference(case: tuple[str, str, datetime, str]) -> None:
    check(*case)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_2026_transition_agrees(policy: str) -> None:
    for zone_name in POLICY_ZONES:
        for transition in transitions(zone_name):
            if transition.year not in (2011, 2026):
                continue
            for expression in ("30 0-3 * * *", "*/30 * * * *", "45 2 * * *", "0 12 * * *"):
                check(expression, zone_name, transition - timedelta(hours=30), policy)


def _annotated(expression: str, zone: str, policy: DstPolicy, after: datetime) -> list[str]:
    out = []
    for occurrence, annotation in Recurrence.parse(expression, zone, policy).iter_annotated(after):
        if occurrence > after + timedelta(days=2):
            break
        out.append(format_occurrence(occurrence) + ("" if annotation is None else " " + annotation))
    return out


def test_new_york_spring_forward_per_policy() -> None:
    after = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    assert _annotated("30 2 * * *", "America/New_York", DstPolicy.SHIFT, after) == [
        "2026-03-08T03:00:00-04:00 shifted",
        "2026-03-09T02:30:00-04:00",
    ]
    assert _annotated("30 2 * * *", "America/New_York", DstPolicy.SKIP, after) == [
        "2026-03-09T02:30:00-04:00"
    ]
    assert _annotated("30 2 * * *", "America/New_York", DstPolicy.LITERAL, after) == [
        "2026-03-09T02:30:00-04:00"
    ]


def test_new_york_fall_back_per_policy() -> None:
    after = datetime(2026, 10, 31, 12, 0, tzinfo=UTC)
    first = ["2026-11-01T01:30:00-04:00 first_pass"]
    nxt = ["2026-11-02T01:30:00-05:00"]
    assert _annotated("30 1 * * *", "America/New_York", DstPolicy.SHIFT, after) == first + nxt
    assert _annotated("30 1 * * *", "America/New_York", DstPolicy.SKIP, after) == first + nxt
    assert _annotated("30 1 * * *", "America/New_York", DstPolicy.LITERAL, after) == [
        *first,
        "2026-11-01T01:30:00-05:00 second_pass",
        *nxt,
    ]


def test_apia_skipped_day() -> None:
    # 2011-12-30 did not exist in Samoa: the clock went from the 29th 23:59:59 -10:00 to the
    # 31st 00:00 +14:00.
    after = datetime(2011, 12, 29, 0, 0, tzinfo=UTC)
    assert _annotated("0 12 * * *", "Pacific/Apia", DstPolicy.SHIFT, after) == [
        "2011-12-29T12:00:00-10:00",
        "2011-12-31T00:00:00+14:00 shifted",
        "2011-12-31T12:00:00+14:00",
    ]
    assert _annotated("0 12 * * *", "Pacific/Apia", DstPolicy.SKIP, after) == [
        "2011-12-29T12:00:00-10:00",
        "2011-12-31T12:00:00+14:00",
    ]


@pytest.mark.parametrize("policy", list(DstPolicy))
def test_wildcard_schedules_are_the_same_under_every_policy(policy: DstPolicy) -> None:
    after = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    for expression in ("*/20 * * * *", "0 * * * *", "*/15 2 * * *"):
        assert _annotated(expression, "America/New_York", policy, after) == _annotated(
            expression, "America/New_York", DstPolicy.SHIFT, after
        )


def test_min_interval_sees_the_literal_second_pass() -> None:
    # A daily fixed schedule fires twice an hour apart on the fall-back day under `literal`.
    since = datetime(2026, 1, 1, tzinfo=UTC)
    literal = Recurrence.parse("30 1 * * *", "America/New_York", DstPolicy.LITERAL)
    shift = Recurrence.parse("30 1 * * *", "America/New_York", DstPolicy.SHIFT)
    assert literal.min_interval_seconds(since) == 3600
    assert shift.min_interval_seconds(since) > 3600
