"""Claim-time misfire (domain/claiming.py rule 5, DESIGN.md §6), pure: runs planned ahead and
claimed after an outage are judged by their schedule's misfire_policy, whatever part of them
one claim sees."""

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain.claiming import (
    ClaimedRun,
    ClaimRead,
    Verdict,
    decide_claims,
    misfire_candidates,
    misfired,
)
from scheduler.domain.policies import MisfirePolicy, OverlapPolicy
from scheduler.domain.run import RUN_SKIPPED, Run, RunStatus, SkipReason, Trigger
from tests.scheduler.runs.test_claiming import OWNER, T0, Spec, claimed

GRACE = timedelta(seconds=60)
MINUTE = timedelta(minutes=1)
# The worker came back 2.5 minutes after T0: T0 and T0+1m are missed, T0+2m is within the grace.
BACK = T0 + timedelta(seconds=150)
FIRE_ONCE, SKIP, FIRE_ALL = MisfirePolicy.FIRE_ONCE, MisfirePolicy.SKIP, MisfirePolicy.FIRE_ALL


def minutes(*ks: int, schedule: str = "sch_1") -> list[Run]:
    return [claimed(schedule, at=T0 + k * MINUTE) for k in ks]


def decide(
    runs: list[Run], read: ClaimRead[Spec], now: datetime = BACK
) -> dict[datetime, ClaimedRun[Spec]]:
    out = decide_claims(runs, read, now=now, misfire_grace=GRACE)
    return {c.run.scheduled_for: c for c in out}


def verdicts(decided: dict[datetime, ClaimedRun[Spec]]) -> list[tuple[Verdict, SkipReason | None]]:
    return [(c.verdict, c.skip_reason) for _, c in sorted(decided.items())]


ATTEMPT = (Verdict.ATTEMPT, None)
MISFIRE = (Verdict.SKIP, SkipReason.MISFIRE)


def test_fire_once_attempts_the_latest_missed_and_the_one_within_the_grace() -> None:
    got = decide(minutes(0, 1, 2), ClaimRead({"sch_1": Spec(misfire_policy=FIRE_ONCE)}))
    assert verdicts(got) == [MISFIRE, ATTEMPT, ATTEMPT]
    skipped = got[T0]
    skipped.conclude(OWNER, BACK)
    (event,) = skipped.run.events
    assert (skipped.run.status, event.type, event.data["skip_reason"]) == (
        RunStatus.SKIPPED,
        RUN_SKIPPED,
        "misfire",
    )


def test_skip_skips_every_missed_run_and_fire_all_none() -> None:
    got = decide(minutes(0, 1, 2), ClaimRead({"sch_1": Spec(misfire_policy=SKIP)}))
    assert verdicts(got) == [MISFIRE, MISFIRE, ATTEMPT]
    got = decide(minutes(0, 1, 2), ClaimRead({"sch_1": Spec(misfire_policy=FIRE_ALL)}))
    assert verdicts(got) == [ATTEMPT] * 3
    fire_all = {"sch_1": Spec(misfire_policy=FIRE_ALL)}
    assert misfire_candidates(minutes(0, 1), fire_all, now=BACK, misfire_grace=GRACE) == []


def test_fire_once_sees_a_later_missed_run_another_claim_holds() -> None:
    """Claimed one at a time (batch of one, or another replica holds the rest): the read says a
    later occurrence was missed too, so this one is skipped; the latest alone is attempted."""
    spec = {"sch_1": Spec(misfire_policy=FIRE_ONCE)}
    (first,) = minutes(0)
    later = ClaimRead(spec, latest_missed={"sch_1": T0 + MINUTE})
    assert verdicts(decide([first], later)) == [MISFIRE]
    (latest,) = minutes(1)
    assert verdicts(decide([latest], later)) == [ATTEMPT]


def test_fire_once_sees_a_later_missed_occurrence_not_planned_yet() -> None:
    """The planner has not caught up yet: next_run_at is missed too, so the planned-ahead run is
    not the latest; the planner will plan that one (domain/planning.py rule 2)."""
    (run,) = minutes(0)
    spec = Spec(misfire_policy=FIRE_ONCE, next_run_at=T0 + MINUTE)
    assert verdicts(decide([run], ClaimRead({"sch_1": spec}))) == [MISFIRE]
    within = Spec(misfire_policy=FIRE_ONCE, next_run_at=T0 + 2 * MINUTE)  # not missed
    assert verdicts(decide([run], ClaimRead({"sch_1": within}))) == [ATTEMPT]


def test_only_first_attempts_of_planned_runs_are_judged() -> None:
    spec = {"sch_1": Spec(misfire_policy=SKIP)}
    retry = claimed(at=T0, attempts=1)  # retried, or taken over from a lost worker
    manual = claimed(at=T0, trigger=Trigger.MANUAL)
    backfill = claimed(at=T0 - timedelta(days=3), trigger=Trigger.BACKFILL)
    out = decide_claims([retry, manual, backfill], ClaimRead(spec), now=BACK, misfire_grace=GRACE)
    assert [c.verdict for c in out] == [Verdict.ATTEMPT] * 3


def test_the_grace_is_the_callers_and_due_counts_not_scheduled_for() -> None:
    (run,) = minutes(0)
    spec = {"sch_1": Spec(misfire_policy=SKIP)}
    wide = decide_claims([run], ClaimRead(spec), now=BACK, misfire_grace=timedelta(minutes=3))
    assert wide[0].verdict is Verdict.ATTEMPT
    jittered = claimed(at=T0)
    jittered.due_at = T0 + timedelta(seconds=100)  # due 50 s ago: not missed
    assert verdicts(decide([jittered], ClaimRead(spec))) == [ATTEMPT]


def test_a_buffer_one_run_that_waited_is_due_from_its_predecessors_finish() -> None:
    spec = Spec(misfire_policy=SKIP, overlap_policy=OverlapPolicy.BUFFER_ONE)
    (run,) = minutes(0)
    waited = ClaimRead({"sch_1": spec}, predecessor_finished={run.id: BACK - timedelta(seconds=2)})
    assert verdicts(decide([run], waited)) == [ATTEMPT]
    long_ago = ClaimRead({"sch_1": spec}, predecessor_finished={run.id: T0 - MINUTE})
    assert verdicts(decide([run], long_ago)) == [MISFIRE]


def test_misfire_comes_before_overlap() -> None:
    """A missed run with a running predecessor is a misfire, not an overlap: the claim excludes
    the runs it skips for misfire from the overlap read (dispatch_service)."""
    spec = Spec(misfire_policy=SKIP, overlap_policy=OverlapPolicy.SKIP)
    (run,) = minutes(0)
    got = decide([run], ClaimRead({"sch_1": spec}, earlier_unfinished={run.id: 1}))
    assert verdicts(got) == [MISFIRE]


def test_misfired_names_the_runs_decide_claims_skips_for_misfire() -> None:
    runs = minutes(0, 1, 2) + minutes(0, 1, schedule="sch_2")
    read = ClaimRead({"sch_1": Spec(misfire_policy=FIRE_ONCE), "sch_2": Spec(misfire_policy=SKIP)})
    ids = misfired(runs, read, now=BACK, misfire_grace=GRACE)
    out = decide_claims(runs, read, now=BACK, misfire_grace=GRACE)
    assert ids == {c.run.id for c in out if c.skip_reason is SkipReason.MISFIRE}
    assert len(ids) == 3


# ---- property: for any runs of one schedule, any now, any read -------------------------------

_offsets = st.integers(min_value=-600, max_value=600)


@st.composite
def claims(draw: st.DrawFn) -> tuple[list[Run], ClaimRead[Spec], datetime]:
    policy = draw(st.sampled_from(list(MisfirePolicy)))
    slots = draw(st.lists(_offsets, min_size=1, max_size=12, unique=True))
    runs: list[Run] = []
    for k in slots:
        trigger = draw(st.sampled_from([Trigger.SCHEDULE] * 4 + [Trigger.MANUAL, Trigger.REPLAY]))
        run = claimed(at=T0 + timedelta(seconds=10 * k), trigger=trigger)
        run.attempt_count = draw(st.sampled_from([0, 0, 0, 1, 3]))
        if draw(st.booleans()):
            run.due_at = run.scheduled_for + timedelta(seconds=draw(st.integers(0, 120)))
        runs.append(run)
    latest = draw(st.none() | _offsets.map(lambda k: T0 + timedelta(seconds=10 * k)))
    nxt = draw(st.none() | _offsets.map(lambda k: T0 + timedelta(seconds=10 * k)))
    spec = Spec(misfire_policy=policy, next_run_at=nxt)
    read = ClaimRead({"sch_1": spec}, latest_missed={} if latest is None else {"sch_1": latest})
    now = T0 + timedelta(seconds=draw(st.integers(-600, 7200)))
    return runs, read, now


def _missed(run: Run, now: datetime) -> bool:
    return run.trigger is Trigger.SCHEDULE and run.attempt_count == 0 and run.due < now - GRACE


@settings(max_examples=400, deadline=None)
@given(claims())
def test_at_most_one_missed_run_attempted_and_no_other_run_skipped(
    case: tuple[list[Run], ClaimRead[Spec], datetime],
) -> None:
    runs, read, now = case
    out = decide_claims(runs, read, now=now, misfire_grace=GRACE)
    assert len(out) == len(runs)
    policy = read.specs["sch_1"].misfire_policy
    missed = [c for c in out if _missed(c.run, now)]
    attempted = [c for c in missed if c.verdict is Verdict.ATTEMPT]
    for c in out:
        if c.skip_reason is SkipReason.MISFIRE:
            assert _missed(c.run, now)  # never a run on time, a retry or a manual one
        else:
            assert c.verdict is Verdict.ATTEMPT  # nothing else here skips, parks or fails
    if policy is MisfirePolicy.FIRE_ALL:
        assert len(attempted) == len(missed)
    elif policy is MisfirePolicy.SKIP:
        assert attempted == []
    else:
        assert len(attempted) <= 1
        if attempted:  # it is the latest missed one the claim holds
            assert attempted[0].run.scheduled_for == max(c.run.scheduled_for for c in missed)
        # And one is attempted when nothing says a later occurrence was missed too.
        mb = now - GRACE
        nothing_later = (
            not read.latest_missed
            or read.latest_missed["sch_1"] <= max((c.run.scheduled_for for c in missed), default=T0)
        ) and not (read.specs["sch_1"].next_run_at or mb) < mb
        if missed and nothing_later:
            assert len(attempted) == 1
