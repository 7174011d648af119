"""Claim-time decisions (domain/claiming.py), pure: no database, no clock."""

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest

from scheduler.domain.claiming import (
    BUFFER_RECHECK,
    ClaimedRun,
    ClaimRead,
    LostReason,
    Verdict,
    decide_claims,
    may_wait,
    overlap_candidates,
)
from scheduler.domain.policies import MisfirePolicy, OverlapPolicy, RetryPolicy
from scheduler.domain.run import (
    LOST_ATTEMPT_KIND,
    RUN_FAILED,
    RUN_SKIPPED,
    Run,
    RunStatus,
    SkipReason,
    Trigger,
)
from tests.scheduler.definitions import BASE

T0 = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
NOW = T0 + timedelta(seconds=1)
OWNER = "w:1"


@dataclass(frozen=True)
class Spec:
    active: bool = True
    deleted: bool = False
    overlap_policy: OverlapPolicy = OverlapPolicy.ALLOW
    retry_policy: RetryPolicy = field(
        default_factory=lambda: replace(BASE.policies.retry_policy, max_attempts=3)
    )
    endpoint: str | None = "hooks.example.com:443"
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    next_run_at: datetime | None = None


def claimed(
    schedule_id: str = "sch_1",
    *,
    tenant: str = "ten_1",
    at: datetime = T0,
    attempts: int = 0,
    trigger: Trigger = Trigger.SCHEDULE,
) -> Run:
    """A run as the claim hands it over: in_progress under OWNER."""
    run = Run.planned(
        tenant_id=tenant, schedule_id=schedule_id, scheduled_for=at, now=at, trigger=trigger
    )
    run.status = RunStatus.IN_PROGRESS
    run.lease_owner = OWNER
    run.lease_expires_at = NOW + timedelta(seconds=30)
    run.started_at = NOW
    run.attempt_count = attempts
    return run


def decide(
    runs: list[Run],
    read: ClaimRead[Spec],
    tenant_suspended_at: Callable[[str, datetime], bool] | None = None,
) -> list[ClaimedRun[Spec]]:
    return decide_claims(
        runs,
        read,
        now=NOW,
        endpoint_of=lambda s: s.endpoint,
        tenant_suspended_at=tenant_suspended_at,
    )


def one(run: Run, spec: Spec | None = Spec(), **read: object) -> ClaimedRun[Spec]:
    specs = {} if spec is None else {run.schedule_id: spec}
    (c,) = decide([run], ClaimRead(specs, **read))  # type: ignore[arg-type]
    return c


def test_a_due_run_of_an_active_schedule_is_attempted_with_its_endpoint() -> None:
    c = one(claimed())
    assert c.verdict is Verdict.ATTEMPT
    assert c.facts.endpoint == "hooks.example.com:443"
    assert not c.wakes_waiting
    with pytest.raises(ValueError):
        c.conclude(OWNER, NOW)


@pytest.mark.parametrize(
    ("spec", "trigger", "reason"),
    [
        (None, Trigger.SCHEDULE, SkipReason.SCHEDULE_DELETED),
        (Spec(deleted=True), Trigger.SCHEDULE, SkipReason.SCHEDULE_DELETED),
        (Spec(active=False), Trigger.SCHEDULE, SkipReason.SCHEDULE_PAUSED),
    ],
)
def test_deleted_and_paused_schedules_skip(
    spec: Spec | None, trigger: Trigger, reason: SkipReason
) -> None:
    c = one(claimed(trigger=trigger), spec)
    assert (c.verdict, c.skip_reason) == (Verdict.SKIP, reason)
    c.conclude(OWNER, NOW)
    assert c.run.status is RunStatus.SKIPPED
    (event,) = c.run.events
    assert (event.type, event.data["skip_reason"]) == (RUN_SKIPPED, str(reason))


def test_a_manual_run_of_a_paused_schedule_is_attempted() -> None:
    assert one(claimed(trigger=Trigger.MANUAL), Spec(active=False)).verdict is Verdict.ATTEMPT


def test_suspension_is_judged_at_scheduled_for_and_for_a_retry_now() -> None:
    asked: list[datetime] = []

    def suspended(tenant: str, instant: datetime) -> bool:
        asked.append(instant)
        return True

    first, retry = claimed(at=T0 - timedelta(hours=1)), claimed("sch_2", attempts=1)
    read = ClaimRead({"sch_1": Spec(), "sch_2": Spec()})
    out = decide([first, retry], read, tenant_suspended_at=suspended)
    assert [c.skip_reason for c in out] == [SkipReason.TENANT_SUSPENDED] * 2
    assert sorted(asked) == [T0 - timedelta(hours=1), NOW]


def test_overlap_skip_with_an_earlier_unfinished_run() -> None:
    run = claimed()
    spec = Spec(overlap_policy=OverlapPolicy.SKIP)
    assert overlap_candidates([run], {run.schedule_id: spec}) == [run]
    c = one(run, spec, earlier_unfinished={run.id: 1})
    assert (c.verdict, c.skip_reason) == (Verdict.SKIP, SkipReason.OVERLAP)
    assert one(claimed(), spec).verdict is Verdict.ATTEMPT


def test_allow_reads_no_overlap_and_manual_runs_none_either() -> None:
    run, manual = claimed(), claimed(trigger=Trigger.MANUAL)
    specs = {"sch_1": Spec()}
    assert overlap_candidates([run], specs) == []
    skip = {"sch_1": Spec(overlap_policy=OverlapPolicy.SKIP)}
    assert overlap_candidates([manual], skip) == []


def test_buffer_one_parks_behind_one_until_it_next_moves() -> None:
    run = claimed()
    spec = Spec(overlap_policy=OverlapPolicy.BUFFER_ONE)
    earlier = {run.id: 1}
    assert may_wait([run], {run.schedule_id: spec}, earlier) == [run]
    moves = NOW + timedelta(seconds=20)
    c = one(run, spec, earlier_unfinished=earlier, predecessors_next_move={run.id: moves})
    assert (c.verdict, c.park_until, c.wakes_waiting) == (Verdict.PARK, moves, False)
    c.conclude(OWNER, NOW)
    assert (c.run.status, c.run.next_attempt_at, c.run.events) == (RunStatus.PENDING, moves, [])


@pytest.mark.parametrize("moves", [None, NOW + timedelta(hours=1), NOW - timedelta(seconds=1)])
def test_a_parked_run_is_rechecked_at_the_latest_after_buffer_recheck(
    moves: datetime | None,
) -> None:
    run = claimed()
    spec = Spec(overlap_policy=OverlapPolicy.BUFFER_ONE)
    next_move = {} if moves is None else {run.id: moves}
    c = one(run, spec, earlier_unfinished={run.id: 1}, predecessors_next_move=next_move)
    assert c.park_until == NOW + BUFFER_RECHECK


def test_buffer_one_behind_two_skips_overlap_and_wakes_nobody() -> None:
    run = claimed()
    c = one(run, Spec(overlap_policy=OverlapPolicy.BUFFER_ONE), earlier_unfinished={run.id: 2})
    assert (c.verdict, c.skip_reason, c.wakes_waiting) == (
        Verdict.SKIP,
        SkipReason.OVERLAP,
        False,
    )


def test_buffer_one_runs_that_end_or_are_attempted_wake_the_waiting_one() -> None:
    spec = Spec(overlap_policy=OverlapPolicy.BUFFER_ONE)
    assert one(claimed(), spec).wakes_waiting
    paused = Spec(overlap_policy=OverlapPolicy.BUFFER_ONE, active=False)
    assert one(claimed(), paused).wakes_waiting
    retry = claimed(attempts=1)  # a retry never waits, even with one earlier unfinished
    c = one(retry, spec, earlier_unfinished={retry.id: 1})
    assert (c.verdict, c.wakes_waiting) == (Verdict.ATTEMPT, True)


def test_a_run_lost_too_often_fails_before_any_other_rule() -> None:
    run = claimed(attempts=2)
    c = one(run, None, lease_expiries={run.id: 5})
    assert (c.verdict, c.lost, c.lease_expiries) == (Verdict.FAIL, LostReason.LEASE_EXPIRIES, 5)
    c.conclude(OWNER, NOW)
    (event,) = c.run.events
    assert event.type == RUN_FAILED
    assert event.data["last_error"]["kind"] == LOST_ATTEMPT_KIND
    assert "expired 5 times" in event.data["last_error"]["message"]


def test_a_lost_last_attempt_fails_instead_of_another() -> None:
    run = claimed(attempts=3)
    c = one(run, Spec(), lease_expiries={run.id: 1})
    assert (c.verdict, c.lost) == (Verdict.FAIL, LostReason.MAX_ATTEMPTS)
    c.conclude(OWNER, NOW)
    (event,) = c.run.events
    assert "attempt 3 of max_attempts 3" in event.data["last_error"]["message"]
    # Not taken over: whether another attempt may go out is the backoff's call at the attempt.
    assert one(claimed(attempts=3), Spec()).verdict is Verdict.ATTEMPT


def test_a_retried_run_carries_its_earlier_attempts_time_to_its_event() -> None:
    run = claimed(attempts=2)
    c = one(run, Spec(deleted=True), earlier_delivery_ms={run.id: 300})
    assert c.facts.earlier_delivery_ms == 300
    c.conclude(OWNER, NOW)
    (event,) = c.run.events
    assert (event.data["delivery_ms"], event.data["endpoint"]) == (300, "hooks.example.com:443")


def test_attempts_go_tenant_by_tenant_in_turn() -> None:
    a = [claimed(f"a{i}", tenant="ten_a", at=T0 + timedelta(seconds=i)) for i in range(3)]
    b = [claimed("b0", tenant="ten_b", at=T0 + timedelta(seconds=5))]
    specs = {r.schedule_id: Spec() for r in a + b}
    out = decide(a + b, ClaimRead(specs))
    assert [c.run.schedule_id for c in out] == ["a0", "b0", "a1", "a2"]


def test_decisions_do_not_touch_the_runs() -> None:
    run = claimed()
    one(run, None)
    assert (run.status, run.lease_owner, run.events) == (RunStatus.IN_PROGRESS, OWNER, [])
