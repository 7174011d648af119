"""Planning: exactly one row per occurrence across any sequence of passes, misfire and overlap
policies, tenant suspension, quota, and the per-pass bound."""

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain.planning import (
    PlanningDecision,
    PlanState,
    plan_occurrences,
)
from scheduler.domain.policies import MisfirePolicy, OverlapPolicy
from scheduler.domain.run import RunStatus, SkipReason

T0 = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)
LOOKAHEAD = timedelta(seconds=5)


def every(
    step: timedelta, *, until: datetime | None = None
) -> Callable[[datetime], datetime | None]:
    """Occurrences at T0 + k*step (k >= 0), optionally none after `until`: a stand-in for the
    occurrence engine with the same contract (strictly after the argument)."""

    def next_after(t: datetime) -> datetime | None:
        k = (t - T0) // step + 1 if t >= T0 else 0
        nxt = T0 + k * step
        return None if until is not None and nxt > until else nxt

    return next_after


MINUTELY = every(timedelta(minutes=1))


def plan(
    next_run_at: datetime | None,
    now: datetime,
    policy: MisfirePolicy = MisfirePolicy.FIRE_ALL,
    **kw: object,
) -> PlanningDecision:
    overlap = kw.pop("overlap", OverlapPolicy.ALLOW)
    unfinished = kw.pop("unfinished", False)
    state = PlanState(next_run_at, policy, overlap, unfinished)  # type: ignore[arg-type]
    kw.setdefault("next_after", MINUTELY)
    kw.setdefault("lookahead", LOOKAHEAD)
    kw.setdefault("misfire_grace", GRACE)
    return plan_occurrences(state, now=now, **kw)  # type: ignore[arg-type]


def drain(
    next_run_at: datetime | None, now: datetime, policy: MisfirePolicy, max_per_pass: int
) -> tuple[list[tuple[datetime, RunStatus, SkipReason | None]], datetime | None, int]:
    """Plan repeatedly at one `now` until no more is due; returns rows, next_run_at, passes."""
    rows = []
    passes = 0
    while True:
        d = plan(next_run_at, now, policy, max_per_pass=max_per_pass)
        passes += 1
        assert len(d.occurrences) <= max_per_pass
        rows += [(o.scheduled_for, o.status, o.skip_reason) for o in d.occurrences]
        next_run_at = d.next_run_at
        if not d.more_due:
            return rows, next_run_at, passes
        assert passes < 10_000


# ---- on time ---------------------------------------------------------------------------------


def test_due_and_lookahead_occurrences_are_planned_pending() -> None:
    d = plan(T0, T0 + timedelta(seconds=1), next_after=every(timedelta(seconds=2)))
    assert [o.scheduled_for for o in d.occurrences] == [
        T0 + timedelta(seconds=s) for s in (0, 2, 4, 6)
    ]
    assert all(o.status is RunStatus.PENDING for o in d.occurrences)
    assert d.next_run_at == T0 + timedelta(seconds=8)
    assert not d.more_due


def test_nothing_planned_before_the_lookahead_window() -> None:
    d = plan(T0, T0 - timedelta(seconds=6))
    assert d.occurrences == ()
    assert d.next_run_at == T0


def test_a_planner_a_few_seconds_late_still_fires_under_skip() -> None:
    d = plan(T0, T0 + timedelta(seconds=59), MisfirePolicy.SKIP)
    assert d.occurrences[0].status is RunStatus.PENDING


def test_finished_schedule_plans_nothing() -> None:
    d = plan(None, T0)
    assert d.occurrences == ()
    assert d.next_run_at is None
    assert not d.more_due
    last = plan(T0, T0, next_after=every(timedelta(minutes=1), until=T0))
    assert len(last.occurrences) == 1
    assert last.next_run_at is None


def test_next_after_must_move_forward() -> None:
    with pytest.raises(ValueError):
        plan(T0, T0, next_after=lambda t: t)


@pytest.mark.parametrize(
    "kw",
    [
        {"lookahead": timedelta(seconds=-1)},
        {"lookahead": timedelta(hours=2)},
        {"misfire_grace": timedelta(seconds=-1)},
        {"max_per_pass": 0},
        {"runs_allowed_today": -1},
    ],
)
def test_bad_parameters_are_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        plan(T0, T0, **kw)


# ---- misfires -------------------------------------------------------------------------------

# Down for 11 minutes: occurrences at minutes 0..10 are over 60 s late (missed), 11 is due now.
NOW_AFTER_OUTAGE = T0 + timedelta(minutes=11, seconds=1)


def statuses(d: PlanningDecision) -> list[tuple[int, RunStatus, SkipReason | None]]:
    return [
        (int((o.scheduled_for - T0).total_seconds() // 60), o.status, o.skip_reason)
        for o in d.occurrences
    ]


def test_fire_all_runs_every_missed_occurrence() -> None:
    d = plan(T0, NOW_AFTER_OUTAGE, MisfirePolicy.FIRE_ALL)
    assert [s for _, s, _ in statuses(d)] == [RunStatus.PENDING] * 12


def test_fire_once_runs_only_the_latest_missed() -> None:
    d = plan(T0, NOW_AFTER_OUTAGE, MisfirePolicy.FIRE_ONCE)
    got = statuses(d)
    assert got[:10] == [(m, RunStatus.SKIPPED, SkipReason.MISFIRE) for m in range(10)]
    assert got[10:] == [(10, RunStatus.PENDING, None), (11, RunStatus.PENDING, None)]


def test_skip_records_every_missed_occurrence_as_skipped() -> None:
    d = plan(T0, NOW_AFTER_OUTAGE, MisfirePolicy.SKIP)
    got = statuses(d)
    assert got[:11] == [(m, RunStatus.SKIPPED, SkipReason.MISFIRE) for m in range(11)]
    assert got[11] == (11, RunStatus.PENDING, None), "the on-time occurrence fires"


def test_a_month_down_is_recorded_in_bounded_passes() -> None:
    due = T0 + timedelta(days=30)
    now = due + timedelta(seconds=1)
    rows, nxt, passes = drain(T0, now, MisfirePolicy.FIRE_ONCE, max_per_pass=1000)
    assert len(rows) == 30 * 24 * 60 + 1
    assert passes == 44
    assert len({r[0] for r in rows}) == len(rows)
    pending = [r[0] for r in rows if r[1] is RunStatus.PENDING]
    assert pending == [due - timedelta(minutes=1), due], "the latest missed, then the due one"
    assert nxt == due + timedelta(minutes=1)


# ---- overlap, suspension, quota -------------------------------------------------------------


def test_overlap_skips_due_occurrence_while_previous_unfinished() -> None:
    d = plan(T0, T0, overlap=OverlapPolicy.SKIP, unfinished=True)
    assert statuses(d) == [(0, RunStatus.SKIPPED, SkipReason.OVERLAP)]
    allowed = plan(T0, T0, overlap=OverlapPolicy.ALLOW, unfinished=True)
    assert statuses(allowed) == [(0, RunStatus.PENDING, None)]


def test_overlap_is_not_judged_for_occurrences_planned_ahead() -> None:
    # The previous run may finish before T0; the dispatcher judges it at claim time.
    d = plan(T0, T0 - timedelta(seconds=3), overlap=OverlapPolicy.SKIP, unfinished=True)
    assert statuses(d) == [(0, RunStatus.PENDING, None)]


def test_catch_up_with_overlap_skip_runs_the_first_and_skips_the_rest() -> None:
    d = plan(T0, NOW_AFTER_OUTAGE, MisfirePolicy.FIRE_ALL, overlap=OverlapPolicy.SKIP)
    got = statuses(d)
    assert got[0] == (0, RunStatus.PENDING, None)
    assert got[1:] == [(m, RunStatus.SKIPPED, SkipReason.OVERLAP) for m in range(1, 12)]


def test_tenant_suspended_at_scheduled_for_is_skipped() -> None:
    suspended_from, reinstated = T0 + timedelta(minutes=2), T0 + timedelta(minutes=5)
    asked: list[datetime] = []

    def suspended(t: datetime) -> bool:
        asked.append(t)
        return suspended_from <= t < reinstated

    now = T0 + timedelta(minutes=6, seconds=58)  # minute 7 is in the look-ahead
    d = plan(T0, now, MisfirePolicy.FIRE_ALL, tenant_suspended_at=suspended)
    got = statuses(d)
    skipped = [m for m, s, r in got if r is SkipReason.TENANT_SUSPENDED]
    assert skipped == [2, 3, 4]
    assert [m for m, s, _ in got if s is RunStatus.PENDING] == [0, 1, 5, 6, 7]
    assert max(asked) <= now, "occurrences ahead are judged by the dispatcher"


def test_quota_budget_limits_pending_runs_and_skipped_rows_do_not_use_it() -> None:
    d = plan(
        T0,
        NOW_AFTER_OUTAGE,
        MisfirePolicy.FIRE_ONCE,
        runs_allowed_today=1,
    )
    got = statuses(d)
    assert [r for _, _, r in got].count(SkipReason.MISFIRE) == 10
    assert got[10] == (10, RunStatus.PENDING, None)
    assert got[11] == (11, RunStatus.SKIPPED, SkipReason.QUOTA)
    assert d.pending_count == 1


def test_occurrences_become_runs_in_order() -> None:
    """What the planner inserts: one run per occurrence (`to_run`), the pending one due at its
    occurrence, the skipped ones finished."""
    d = plan(T0, NOW_AFTER_OUTAGE, MisfirePolicy.FIRE_ONCE)
    runs = [
        o.to_run(tenant_id="ten_1", schedule_id="sch_1", now=NOW_AFTER_OUTAGE)
        for o in d.occurrences
    ]
    assert [r.scheduled_for for r in runs] == [o.scheduled_for for o in d.occurrences]
    assert [r.status for r in runs] == [o.status for o in d.occurrences]
    assert [r.skip_reason for r in runs] == [o.skip_reason for o in d.occurrences]
    assert len({r.id for r in runs}) == len(runs)
    assert runs[-1].next_attempt_at == runs[-1].scheduled_for
    assert runs[0].next_attempt_at is None


# ---- properties over many passes ------------------------------------------------------------

policies = st.sampled_from(list(MisfirePolicy))


@settings(max_examples=150, deadline=None)
@given(
    policy=policies,
    overlap=st.sampled_from(list(OverlapPolicy)),
    step_s=st.integers(min_value=1, max_value=600),
    # Planner passes at random times, including replicas whose clocks lag (now going backwards).
    nows_s=st.lists(st.integers(min_value=-300, max_value=20_000), min_size=1, max_size=25),
    max_per_pass=st.integers(min_value=1, max_value=50),
    lookahead_s=st.integers(min_value=0, max_value=30),
)
def test_passes_never_duplicate_and_never_lose_an_occurrence(
    policy: MisfirePolicy,
    overlap: OverlapPolicy,
    step_s: int,
    nows_s: list[int],
    max_per_pass: int,
    lookahead_s: int,
) -> None:
    step, lookahead = timedelta(seconds=step_s), timedelta(seconds=lookahead_s)
    next_after = every(step)
    next_run_at: datetime | None = T0
    seen: list[datetime] = []
    unfinished = False

    def one_pass(now: datetime) -> PlanningDecision:
        nonlocal next_run_at, unfinished
        d = plan_occurrences(
            PlanState(next_run_at, policy, overlap, unfinished),
            now=now,
            next_after=next_after,
            lookahead=lookahead,
            misfire_grace=GRACE,
            max_per_pass=max_per_pass,
        )
        assert len(d.occurrences) <= max_per_pass
        planned = [o.scheduled_for for o in d.occurrences]
        assert planned == sorted(planned)
        assert all(t <= now + lookahead for t in planned), "never beyond the horizon"
        if planned:
            assert planned[0] == next_run_at, "no gap"
            assert d.next_run_at is None or d.next_run_at > planned[-1], "strictly later"
        else:
            assert d.next_run_at == next_run_at
        seen.extend(planned)
        next_run_at = d.next_run_at
        unfinished = unfinished or d.pending_count > 0
        return d

    for s in nows_s:
        one_pass(T0 + timedelta(seconds=s))
    # Catch up at the latest time any pass saw: afterwards everything up to its horizon exists.
    final_now = T0 + timedelta(seconds=max(nows_s))
    while one_pass(final_now).more_due:
        pass

    assert len(seen) == len(set(seen)), "an occurrence was planned twice"
    expected, t = [], T0
    while t <= final_now + lookahead:
        expected.append(t)
        t = t + step
    assert seen == expected, "an occurrence was lost or invented"


@settings(max_examples=100, deadline=None)
@given(
    policy=policies,
    missed=st.integers(min_value=1, max_value=300),
    max_per_pass=st.integers(min_value=1, max_value=40),
)
def test_misfire_policy_over_bounded_passes(
    policy: MisfirePolicy, missed: int, max_per_pass: int
) -> None:
    # `missed` occurrences lie more than the grace in the past; planning resumes at one `now`.
    now = T0 + timedelta(minutes=missed, seconds=30)  # minute `missed` is within the grace
    rows, _, passes = drain(T0, now, policy, max_per_pass)
    late = [r for r in rows if now - r[0] > GRACE]
    assert len(late) == missed
    assert passes == -(-len(rows) // max_per_pass) or passes == -(-len(rows) // max_per_pass) + 1
    pending = [r for r in late if r[1] is RunStatus.PENDING]
    if policy is MisfirePolicy.FIRE_ALL:
        assert len(pending) == missed
    elif policy is MisfirePolicy.FIRE_ONCE:
        assert pending == [(late[-1][0], RunStatus.PENDING, None)], "exactly the latest"
    else:
        assert pending == []
    assert all(r[2] is SkipReason.MISFIRE for r in late if r[1] is RunStatus.SKIPPED)
    on_time = [r for r in rows if now - r[0] <= GRACE]
    assert on_time
    assert all(r[1] is RunStatus.PENDING for r in on_time)


def test_fall_back_second_pass_is_later_not_earlier() -> None:
    """Engine datetimes carry the zone; in a repeated hour the second pass (fold=1) compares as
    earlier by wall time. Planning orders by instant, so a wildcard schedule plans both passes."""
    from scheduler.domain.occurrences import Recurrence

    rec = Recurrence.parse("*/30 * * * *", "America/New_York")
    start = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)  # 01:00 EDT, first pass of the repeated hour
    first = rec.next_after(start - timedelta(minutes=1))
    assert first is not None
    decision = plan_occurrences(
        PlanState(next_run_at=first, misfire_policy=MisfirePolicy.FIRE_ALL),
        now=datetime(2026, 11, 1, 7, 0, tzinfo=UTC),
        next_after=rec.next_after,
        misfire_grace=timedelta(days=1),
    )
    instants = [o.scheduled_for for o in decision.occurrences]
    assert instants == sorted(instants)
    # 01:00, 01:30 EDT, 01:00, 01:30 EST, 02:00 EST = 05:00..07:00 UTC every 30 minutes
    assert [i.astimezone(UTC).strftime("%H:%M") for i in instants] == [
        "05:00",
        "05:30",
        "06:00",
        "06:30",
        "07:00",
    ]
