"""Planning use case: turn due occurrences into run rows (DESIGN.md §6).

One pass = one transaction over a batch of due schedules (`next_run_at <= now + lookahead`,
active, live), locked so replicas share the work: decide each with `domain/planning.py`, insert
the runs (planned duplicates ignored by the unique key, and then neither counted toward max_runs
nor announced) and advance `next_run_at`, all committed together. A crash before commit plans
nothing; after commit, everything. `more_due` (a schedule with more occurrences than one pass
materialises, or a full batch) makes the caller plan again at once.

Timing (DESIGN.md §7a): occurrences come from the schedule's CompiledTiming (bounds, one-shot,
DST policy), `max_runs` through PlanState.runs_left, and each pending run's `due_at` carries the
schedule's jitter. A schedule left with no occurrence is completed in the same transaction
(`Schedule.complete`, event `schedule.completed`).

With a tenant projection (`tenants`), suspended tenants' occurrences are skipped and each
tenant's `max_runs_per_day` budget (its non-skipped runs created in the UTC day of `now`, the
day this pass creates its runs in, counted in the same transaction) turns pending runs beyond it
into `skipped` (`quota`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache, partial

from scheduler.domain.planning import (
    DEFAULT_LOOKAHEAD,
    DEFAULT_MAX_PER_PASS,
    DEFAULT_MISFIRE_GRACE,
    PlanningDecision,
    PlanState,
    plan_occurrences,
)
from scheduler.domain.policies import OverlapPolicy
from scheduler.domain.run import Run, RunStatus
from scheduler.domain.tenant import quota_day, runs_remaining
from scheduler.domain.timing import CompiledTiming, Timing
from scheduler.domain.versions import Actor, Source
from scheduler.service_layer.run_ports import (
    PlanUpdate,
    RunRepository,
    ScheduleToPlan,
    TenantStatus,
)
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory

Clock = Callable[[], datetime]
DEFAULT_BATCH = 500  # schedules per transaction: bounds lock time and statement size
RECURRENCE_CACHE = 4096  # parsed expressions kept: parse once per schedule, never per run


@lru_cache(maxsize=RECURRENCE_CACHE)
def timing_of(timing: Timing) -> CompiledTiming:
    return timing.compile()


def _suspended(tenants: TenantStatus, tenant_id: str, instant: datetime) -> bool:
    return tenants.suspended_at(tenant_id, instant)


@dataclass(frozen=True)
class PlanningReport:
    schedules: int
    """Schedules planned in this pass."""
    runs_inserted: int
    """New run rows (skipped ones included)."""
    earliest_pending: datetime | None
    """The earliest scheduled_for among new pending runs (to wake the dispatcher)."""
    more_due: bool
    """Plan again at once: the batch was full or a schedule has more occurrences due."""


@dataclass
class PlanningSettings:
    lookahead: timedelta = DEFAULT_LOOKAHEAD
    misfire_grace: timedelta = DEFAULT_MISFIRE_GRACE
    batch: int = DEFAULT_BATCH
    max_per_pass: int = DEFAULT_MAX_PER_PASS


async def plan_due(
    uows: UnitOfWorkFactory,
    *,
    now: datetime,
    settings: PlanningSettings | None = None,
    tenants: TenantStatus | None = None,
) -> PlanningReport:
    """One planning pass at `now`."""
    cfg = settings or PlanningSettings()
    async with uows(Actor.system(Source.PLANNER)) as uow:
        runs = uow.runs
        due = await runs.lock_due_schedules(now + cfg.lookahead, cfg.batch)
        if not due:
            return PlanningReport(0, 0, None, False)
        overlap_skip = OverlapPolicy.SKIP
        needs_overlap = [s.id for s in due if s.definition.policies.overlap_policy is overlap_skip]
        unfinished = await runs.unfinished_schedule_ids(needs_overlap)
        budgets = (
            await _DailyBudgets.load(runs, tenants, [s.tenant_id for s in due], now)
            if tenants is not None
            else None
        )
        passes = [_plan_schedule(s, now, cfg, s.id in unfinished, budgets) for s in due]
        new_runs = [run for p in passes for run in p.runs]
        # An occurrence already planned (next_run_at moved back over it) is not inserted again:
        # only the new rows count toward max_runs and record events.
        new_ids = await runs.insert_new_runs(new_runs)
        updates = [p.update(new_ids) for p in passes]
        await runs.set_next_run_at(updates)
        # Bounds, max_runs or a one-shot reached (a herd of one-shots: every schedule of the pass):
        # the aggregate records schedule.completed; saved in a few statements for the batch.
        completed = [p.schedule.id for p in passes if p.completes()]
        finished = list((await uow.schedules.lock(completed)).values())
        for schedule in finished:
            schedule.complete(now)
        await uow.schedules.save_locked(finished)
        inserted = [r for r in new_runs if r.id in new_ids]
        # Runs skipped at plan time record schedule.run.skipped; it goes out with their rows.
        for run in inserted:
            for event in run.events:
                uow.add_event(event)
            run.events.clear()
        await uow.commit()
    more_due = len(due) >= cfg.batch or any(p.more_due for p in passes)
    pending = [r.scheduled_for for r in inserted if r.status is RunStatus.PENDING]
    return PlanningReport(len(due), len(inserted), min(pending) if pending else None, more_due)


@dataclass
class _SchedulePlan:
    """One schedule's share of a pass: the runs it decided and where it leaves next_run_at."""

    schedule: ScheduleToPlan
    timing: CompiledTiming | None
    """None: its stored timing no longer compiles, so it is not planned any more."""
    next_run_at: datetime | None
    runs: list[Run]
    more_due: bool

    def update(self, new_ids: set[str]) -> PlanUpdate:
        """What the pass stores, once the inserts said which runs were new (`new_ids`)."""
        count = sum(1 for r in self.runs if r.id in new_ids)
        max_runs = self.schedule.definition.timing.max_runs
        if (
            self.timing is not None
            and self.next_run_at is None
            and count < len(self.runs)
            and max_runs is not None
            and self.schedule.planned_runs + count < max_runs
        ):
            # max_runs ended the pass, but duplicates used some of its slots: not reached.
            self.next_run_at = self.timing.next_after(self.runs[-1].scheduled_for)
            self.more_due = True
        return PlanUpdate(self.schedule.id, self.next_run_at, count)

    def completes(self) -> bool:
        """No occurrence is left (after `update`); not a schedule whose timing broke."""
        return self.timing is not None and self.next_run_at is None


def _plan_schedule(
    s: ScheduleToPlan,
    now: datetime,
    cfg: PlanningSettings,
    unfinished: bool,
    budgets: _DailyBudgets | None,
) -> _SchedulePlan:
    try:
        timing = timing_of(s.definition.timing)
    except ValueError:
        # A stored expression the engine now refuses: stop planning it (no runs),
        # rather than failing every pass for every tenant.
        return _SchedulePlan(s, None, None, [], False)
    policies, max_runs = s.definition.policies, s.definition.timing.max_runs
    state = PlanState(
        next_run_at=s.next_run_at,
        misfire_policy=policies.misfire_policy,
        overlap_policy=policies.overlap_policy,
        previous_run_unfinished=unfinished,
        runs_left=None if max_runs is None else max_runs - s.planned_runs,
    )
    if budgets is None:  # no tenant projection: nobody is suspended, no daily budget
        decision = plan_occurrences(
            state,
            now=now,
            next_after=timing.next_after,
            lookahead=cfg.lookahead,
            misfire_grace=cfg.misfire_grace,
            max_per_pass=cfg.max_per_pass,
        )
    else:
        plan = partial(
            plan_occurrences,
            now=now,
            next_after=timing.next_after,
            misfire_grace=cfg.misfire_grace,
            tenant_suspended_at=partial(_suspended, budgets.tenants, s.tenant_id),
        )
        decision = budgets.plan(s.tenant_id, state, plan, cfg)
    runs: list[Run] = []
    for occurrence in decision.occurrences:
        to_send = occurrence.status is RunStatus.PENDING
        runs.append(
            occurrence.to_run(
                tenant_id=s.tenant_id,
                schedule_id=s.id,
                now=now,
                payload=s.definition.payload if to_send else None,
                due_at=timing.due_at(s.id, occurrence.scheduled_for) if to_send else None,
                schedule_version=s.version,
            )
        )
    return _SchedulePlan(s, timing, decision.next_run_at, runs, decision.more_due)


class _DailyBudgets:
    """max_runs_per_day at planning (DESIGN §6): each tenant's remaining runs in the UTC day of
    `now`. Every run a pass creates (created_at `now`) counts toward that day, also an
    occurrence the look-ahead reaches past midnight, so one count (and one lock) per tenant
    covers the pass."""

    def __init__(self, tenants: TenantStatus, today: dict[str, int]):
        self.tenants = tenants
        self.today = today

    @classmethod
    async def load(
        cls, runs: RunRepository, tenants: TenantStatus, tenant_ids: list[str], now: datetime
    ) -> _DailyBudgets:
        ids = sorted(set(tenant_ids))
        used = await runs.count_runs_by_tenant(ids, *quota_day(now))
        return cls(
            tenants, {t: runs_remaining(tenants.entitlements(t), used.get(t, 0)) for t in ids}
        )

    def plan(
        self,
        tenant_id: str,
        state: PlanState,
        plan: Callable[..., PlanningDecision],
        cfg: PlanningSettings,
    ) -> PlanningDecision:
        decision = plan(
            state,
            lookahead=cfg.lookahead,
            max_per_pass=cfg.max_per_pass,
            runs_allowed_today=self.today[tenant_id],
        )
        self.today[tenant_id] -= decision.pending_count
        return decision


async def next_planning_at(uows: UnitOfWorkFactory, lookahead: timedelta) -> datetime | None:
    """When the next pass has work: the earliest next_run_at minus the look-ahead."""
    async with uows() as uow:
        due = await uow.runs.next_schedule_due_at()
    return None if due is None else due - lookahead
