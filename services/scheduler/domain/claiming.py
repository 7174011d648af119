"""Claim-time decisions: what becomes of each run a dispatcher claimed (DESIGN.md §6).

Pure, like `plan_occurrences`: `decide_claims` takes the claimed runs and what the claim read
(`ClaimRead`: each schedule's spec, the earlier unfinished runs, when a waiting run's predecessor
next moves, the lost attempts, the latest missed occurrences) and returns one `ClaimedRun` per
run, in the order attempts should start, whose `verdict` says what to do with it. The
dispatcher performs the ATTEMPTs and calls `conclude` on the others, whose transition it then
writes like any attempt's.

The planner cannot know these when it plans ahead. Rules, in this order, for each run:

1. Its lease expired `max_lease_expiries` times (a run that takes its worker down must not take
   down every worker in turn) -> FAIL worker_lost (`LostReason.LEASE_EXPIRIES`).
2. Taken over from a lost worker with the retry policy's attempts used up (another would go out
   as X-Attempt max_attempts + 1) -> FAIL worker_lost (`LostReason.MAX_ATTEMPTS`).
3. Its schedule is deleted (or its row gone) -> SKIP schedule_deleted; a planned run of a paused
   schedule -> SKIP schedule_paused (manual runs and replays are delivered: a tenant asked).
4. The tenant was suspended at scheduled_for (a retry: now) -> SKIP tenant_suspended.
5. Misfire (`misfired`): a planned run's first attempt claimed later than `misfire_grace` after
   it came due is missed. `skip` -> SKIP misfire; `fire_once` -> SKIP misfire when a later
   occurrence of its schedule is missed too, so only the latest missed one is attempted, like
   the planner's catch-up (domain/planning.py rule 2) whichever claim, batch or replica sees it;
   `fire_all` -> on to the next rules.
6. overlap_policy skip with any earlier run unfinished, or buffer_one (a first attempt) with two
   (one running, one waiting) -> SKIP overlap.
7. buffer_one (a first attempt) with exactly one earlier run unfinished -> PARK: pending again,
   due when its predecessor next moves by itself (a retry, a lease's end), `BUFFER_RECHECK` at
   the latest. Its predecessor's finishing, however it finishes, makes it due at once (settle:
   `wake_waiting`), so the recheck is a safety net, not a poll.
8. Otherwise -> ATTEMPT.

Misfire, in detail (DESIGN.md §6). Only the first attempt of a `trigger = schedule` run is
judged: manual, replay and backfill runs were asked for; a retry was already attempted; a run
taken over from a lost worker was claimed in time and its attempt may have reached the receiver
(the take-over counts it, so its `attempt_count` is not 0): a redelivery, never a misfire. A run
given back unattempted (released at a clean stop) is still a first attempt and is judged. A run
"came due" at its due instant (`Run.due`), or, of a buffer_one schedule, when the previous run
that was not skipped finished, if later (`ClaimRead.predecessor_finished`): a run that waited
for its predecessor was delayed by design, not missed. "A later occurrence missed too" is any
of: a later planned run of the schedule, not skipped, due before `now - misfire_grace`
(`ClaimRead.latest_missed`, read per schedule by the claim; the planner's own catch-up rows
included, its skipped ones not: it already recorded those); a later such run in this claim; or
the schedule's `next_run_at` (an occurrence the planner has not materialised yet) before
`now - misfire_grace`. That later run is delivered, or judged the same way, in its turn. The
runs a misfire skips do not count as earlier unfinished runs for rules 6-7 (the claim reads
`earlier_unfinished` excluding them), so a fire_once schedule with an overlap policy still
delivers its latest missed occurrence.

Every run of a buffer_one schedule that ends or is attempted `wakes_waiting` (its schedule's
parked run is due once it is terminal), except a skip for overlap: the run that blocks it runs on.

Attempts go tenant by tenant in turn (`tenant_round_robin`), each tenant's oldest first, so one
tenant's many runs in a claim do not all take the slots before another tenant's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from scheduler.domain.planning import DEFAULT_MISFIRE_GRACE
from scheduler.domain.policies import MisfirePolicy, OverlapPolicy, RetryPolicy
from scheduler.domain.run import (
    DEFAULT_MAX_LEASE_EXPIRIES,
    NO_FACTS,
    ClaimFacts,
    Run,
    SkipReason,
    Trigger,
)

BUFFER_RECHECK = timedelta(seconds=60)
"""Longest a parked buffer_one run waits before it is claimed again and judged anew."""


class ScheduleAtClaim(Protocol):
    """What the decisions need of a run's schedule, as the claim read it."""

    @property
    def active(self) -> bool: ...

    @property
    def deleted(self) -> bool: ...

    @property
    def overlap_policy(self) -> OverlapPolicy: ...

    @property
    def retry_policy(self) -> RetryPolicy: ...

    @property
    def misfire_policy(self) -> MisfirePolicy: ...

    @property
    def next_run_at(self) -> datetime | None:
        """The first occurrence the planner has not materialised yet (None: none left)."""
        ...


S = TypeVar("S", bound=ScheduleAtClaim)


class Verdict(StrEnum):
    ATTEMPT = "attempt"
    SKIP = "skip"
    PARK = "park"
    """Wait for the schedule's previous run (buffer_one)."""
    FAIL = "fail"
    """worker_lost: not attempted again."""


class LostReason(StrEnum):
    LEASE_EXPIRIES = "lease_expiries"
    MAX_ATTEMPTS = "max_attempts"


@dataclass(frozen=True)
class ClaimRead(Generic[S]):
    """What the claim read besides the runs, keyed by schedule id (`specs`) or run id."""

    specs: Mapping[str, S]
    """Absent: the schedule row is gone."""
    earlier_unfinished: Mapping[str, int] = field(default_factory=dict)
    """Unfinished runs planned before this one (absent: none); read for `overlap_candidates`."""
    predecessors_next_move: Mapping[str, datetime] = field(default_factory=dict)
    """When a run that may wait (`may_wait`) would see its predecessor move by itself."""
    lease_expiries: Mapping[str, int] = field(default_factory=dict)
    """Lost attempts of a run taken over from a dead worker (absent: none)."""
    earlier_delivery_ms: Mapping[str, int] = field(default_factory=dict)
    """The stored attempts' durations summed, of retried runs."""
    latest_missed: Mapping[str, datetime] = field(default_factory=dict)
    """By schedule id: the scheduled_for of its latest planned run, not skipped, due before
    `now - misfire_grace` (absent: none); read for `misfire_candidates`."""
    predecessor_finished: Mapping[str, datetime] = field(default_factory=dict)
    """By run id, of buffer_one misfire candidates: when the schedule's previous run that was not
    skipped finished (absent: unfinished, or none)."""


@dataclass(slots=True)  # not frozen: one per claimed run, built on the hot path
class ClaimedRun(Generic[S]):
    run: Run
    spec: S | None
    verdict: Verdict
    facts: ClaimFacts = NO_FACTS
    """For the run's terminal event."""
    wakes_waiting: bool = False
    """Once terminal, the run makes its schedule's parked run due (buffer_one)."""
    skip_reason: SkipReason | None = None
    park_until: datetime | None = None
    lost: LostReason | None = None
    lease_expiries: int = 0

    def conclude(self, owner: str, now: datetime) -> None:
        """Make the run's transition under `owner`'s lease, for any verdict but ATTEMPT."""
        run = self.run
        if self.verdict is Verdict.SKIP:
            assert self.skip_reason is not None
            run.skip(self.skip_reason, now, owner=owner, facts=self.facts)
        elif self.verdict is Verdict.PARK:
            assert self.park_until is not None
            run.wait(owner, self.park_until)
        elif self.verdict is Verdict.FAIL:
            max_attempts = None
            if self.lost is LostReason.MAX_ATTEMPTS:
                assert self.spec is not None
                max_attempts = self.spec.retry_policy.max_attempts
            run.fail_lost(
                owner,
                now,
                lease_expiries=self.lease_expiries,
                max_attempts=max_attempts,
                facts=self.facts,
            )
        else:
            raise ValueError("an ATTEMPT is concluded by its attempt")


def overlap_candidates(claimed: Sequence[Run], specs: Mapping[str, S]) -> list[Run]:
    """The runs whose earlier unfinished runs the decisions need (`ClaimRead.earlier_unfinished`):
    planned runs of a schedule whose overlap_policy is not allow."""
    return [
        r
        for r in claimed
        if r.trigger is Trigger.SCHEDULE
        and (spec := specs.get(r.schedule_id)) is not None
        and spec.overlap_policy is not OverlapPolicy.ALLOW
    ]


def may_wait(runs: Sequence[Run], specs: Mapping[str, S], earlier: Mapping[str, int]) -> list[Run]:
    """The runs that may PARK, whose predecessor's next move the decisions need."""
    return [r for r in runs if _waits(r, specs[r.schedule_id], earlier)]


def misfire_candidates(
    claimed: Sequence[Run], specs: Mapping[str, S], *, now: datetime, misfire_grace: timedelta
) -> list[Run]:
    """The runs the misfire rule may skip, whose facts the claim reads (`ClaimRead.latest_missed`,
    `predecessor_finished`): first attempts of planned runs of a skip or fire_once schedule,
    claimed later than `misfire_grace` after their due instant. Usually none: no read."""
    missed_before = now - misfire_grace
    return [
        r
        for r in claimed
        if _judged(r)
        and r.due < missed_before
        and (spec := specs.get(r.schedule_id)) is not None
        and spec.misfire_policy is not MisfirePolicy.FIRE_ALL
    ]


def misfired(
    claimed: Sequence[Run], read: ClaimRead[S], *, now: datetime, misfire_grace: timedelta
) -> set[str]:
    """The ids of the runs rule 5 skips for misfire (the rules above, "Misfire, in detail")."""
    missed_before = now - misfire_grace
    missed = [
        r
        for r in misfire_candidates(claimed, read.specs, now=now, misfire_grace=misfire_grace)
        if _came_due(r, read) < missed_before
    ]
    # The latest missed occurrence of each schedule that this claim itself holds.
    latest: dict[str, datetime] = dict(read.latest_missed)
    for r in missed:
        t = latest.get(r.schedule_id)
        if t is None or r.scheduled_for > t:
            latest[r.schedule_id] = r.scheduled_for
    out: set[str] = set()
    for r in missed:
        spec = read.specs[r.schedule_id]
        if spec.misfire_policy is MisfirePolicy.SKIP:
            out.add(r.id)
            continue
        later = latest[r.schedule_id] > r.scheduled_for
        unplanned = spec.next_run_at
        if later or (unplanned is not None and r.scheduled_for < unplanned < missed_before):
            out.add(r.id)
    return out


def _judged(run: Run) -> bool:
    """Only a planned run's first attempt can be a misfire."""
    return run.trigger is Trigger.SCHEDULE and run.attempt_count == 0


def _came_due(run: Run, read: ClaimRead[S]) -> datetime:
    finished = read.predecessor_finished.get(run.id)
    spec = read.specs.get(run.schedule_id)
    waits = spec is not None and spec.overlap_policy is OverlapPolicy.BUFFER_ONE
    return max(run.due, finished) if waits and finished is not None else run.due


def decide_claims(
    claimed: Sequence[Run],
    read: ClaimRead[S],
    *,
    now: datetime,
    endpoint_of: Callable[[S], str | None] | None = None,
    tenant_suspended_at: Callable[[str, datetime], bool] | None = None,
    max_lease_expiries: int = DEFAULT_MAX_LEASE_EXPIRIES,
    misfire_grace: timedelta = DEFAULT_MISFIRE_GRACE,
) -> list[ClaimedRun[S]]:
    """Decide each claimed run (rules above), in the order attempts should start.

    `endpoint_of(spec)`: the webhook's `host:port` for the terminal event (None: no endpoint);
    `tenant_suspended_at(tenant_id, instant)` answers from the suspension projection (None:
    never suspended); `misfire_grace`: the planner's (PlanningSettings.misfire_grace)."""
    missed = misfired(claimed, read, now=now, misfire_grace=misfire_grace) if claimed else set()
    first_facts: dict[str, ClaimFacts] = {}  # by schedule id, of runs not attempted before
    out: list[ClaimedRun[S]] = []
    for run in tenant_round_robin(claimed):
        spec = read.specs.get(run.schedule_id)
        facts = first_facts.get(run.schedule_id)
        if facts is None:
            endpoint = None if spec is None or endpoint_of is None else endpoint_of(spec)
            facts = first_facts[run.schedule_id] = (
                NO_FACTS if endpoint is None else ClaimFacts(endpoint)
            )
        spent = read.earlier_delivery_ms.get(run.id, 0) if run.attempt_count else 0
        if spent:
            facts = ClaimFacts(facts.endpoint, spent)
        buffer_one = spec is not None and spec.overlap_policy is OverlapPolicy.BUFFER_ONE

        expiries = read.lease_expiries.get(run.id, 0)
        lost: LostReason | None = None
        if expiries >= max_lease_expiries:
            lost = LostReason.LEASE_EXPIRIES
        elif spec is not None and expiries > 0 and run.attempt_count >= _max_attempts(spec):
            lost = LostReason.MAX_ATTEMPTS
        if lost is not None:
            out.append(
                ClaimedRun(
                    run, spec, Verdict.FAIL, facts, buffer_one, lost=lost, lease_expiries=expiries
                )
            )
            continue

        reason = _skip_reason(
            run, spec, read.earlier_unfinished, now, tenant_suspended_at, run.id in missed
        )
        if reason is not None:
            wakes = buffer_one and reason is not SkipReason.OVERLAP
            out.append(ClaimedRun(run, spec, Verdict.SKIP, facts, wakes, skip_reason=reason))
        elif spec is not None and _waits(run, spec, read.earlier_unfinished):
            until = _park_until(read.predecessors_next_move.get(run.id), now)
            out.append(ClaimedRun(run, spec, Verdict.PARK, facts, park_until=until))
        else:
            out.append(ClaimedRun(run, spec, Verdict.ATTEMPT, facts, buffer_one))
    return out


def _max_attempts(spec: ScheduleAtClaim) -> int:
    return spec.retry_policy.max_attempts


def _waits(run: Run, spec: ScheduleAtClaim, earlier: Mapping[str, int]) -> bool:
    """buffer_one: exactly one earlier run unfinished (the one running): this one waits."""
    return (
        spec.overlap_policy is OverlapPolicy.BUFFER_ONE
        and run.attempt_count == 0
        and earlier.get(run.id, 0) == 1
    )


def _skip_reason(
    run: Run,
    spec: ScheduleAtClaim | None,
    earlier: Mapping[str, int],
    now: datetime,
    tenant_suspended_at: Callable[[str, datetime], bool] | None,
    misfire: bool,
) -> SkipReason | None:
    if spec is None or spec.deleted:
        return SkipReason.SCHEDULE_DELETED
    if run.trigger is Trigger.SCHEDULE and not spec.active:
        return SkipReason.SCHEDULE_PAUSED
    judged_at = run.scheduled_for if run.attempt_count == 0 else now
    if tenant_suspended_at is not None and tenant_suspended_at(run.tenant_id, judged_at):
        return SkipReason.TENANT_SUSPENDED
    if misfire:
        return SkipReason.MISFIRE
    n = earlier.get(run.id, 0)
    if spec.overlap_policy is OverlapPolicy.SKIP and n >= 1:
        return SkipReason.OVERLAP
    if spec.overlap_policy is OverlapPolicy.BUFFER_ONE and run.attempt_count == 0 and n >= 2:
        return SkipReason.OVERLAP
    return None


def _park_until(predecessor_moves_at: datetime | None, now: datetime) -> datetime:
    latest = now + BUFFER_RECHECK
    at = predecessor_moves_at
    return at if at is not None and now < at < latest else latest


def tenant_round_robin(claimed: Sequence[Run]) -> list[Run]:
    """One tenant at a time in turn, each tenant's runs oldest first."""
    by_tenant: dict[str, list[Run]] = {}
    for run in sorted(claimed, key=_due_order):
        by_tenant.setdefault(run.tenant_id, []).append(run)
    if len(by_tenant) <= 1:
        return list(claimed) if not by_tenant else next(iter(by_tenant.values()))
    queues = list(by_tenant.values())
    out: list[Run] = []
    for turn in range(max(len(q) for q in queues)):
        out.extend(q[turn] for q in queues if turn < len(q))
    return out


def _due_order(run: Run) -> tuple[datetime, str]:
    # Not next_attempt_at: a claimed run's holds its claim time (domain/run.py).
    return (run.scheduled_for, run.id)
