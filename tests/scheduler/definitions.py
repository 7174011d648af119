"""Schedule definitions for tests: what a create body that leaves every optional field out
gets, with the fields a test names (flat names, as the API spells them) replaced."""

from __future__ import annotations

from typing import Any

from scheduler.domain.definition import RunPolicies, ScheduleDefinition
from scheduler.domain.policies import (
    RESPONSE_COMPLETION,
    Action,
    BreakerPolicy,
    DstPolicy,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
)
from scheduler.domain.timing import Timing

BASE = ScheduleDefinition(
    name="s",
    description=None,
    timing=Timing(
        timezone="UTC",
        cron="* * * * *",
        run_at=None,
        dst_policy=DstPolicy.SHIFT,
        start_at=None,
        end_at=None,
        max_runs=None,
        jitter_seconds=0,
    ),
    action=Action.EVENT,
    target=None,
    payload=None,
    labels={},
    policies=RunPolicies(
        retry_policy=RetryPolicy(
            max_attempts=5,
            initial_backoff_seconds=10.0,
            max_backoff_seconds=3600.0,
            multiplier=2.0,
            max_retry_duration_seconds=86_400.0,
        ),
        misfire_policy=MisfirePolicy.FIRE_ONCE,
        overlap_policy=OverlapPolicy.ALLOW,
        breaker=BreakerPolicy(failure_threshold=5),
        completion=RESPONSE_COMPLETION,
    ),
)


def definition(**fields: Any) -> ScheduleDefinition:
    return BASE.with_changes(fields)


def timing_with(**fields: Any) -> Timing:
    """BASE's timing with `fields` replaced (`cron=None` for a one-shot)."""
    return BASE.with_changes(fields).timing
