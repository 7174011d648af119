"""The runs repository of the unit of work (service_layer/unit_of_work.py) and what the run
workers exchange with it: set-based primitives for the planner, the dispatcher and the runs API.

The hot path (plan, claim, settle) is batched: every primitive takes or returns many rows, so one
transaction serves a whole group (one-row-per-transaction is 17-19x slower on PostgreSQL).

Contract every implementation keeps:
- `insert_runs` ignores a run whose (schedule_id, scheduled_for) is already planned (trigger
  'schedule'): the unique key carries exactly-one-run-per-occurrence, its violation reads as
  "already planned" and is not an error. Likewise a backfill run whose (schedule_id,
  scheduled_for, backfill_id) exists (one run per occurrence per backfill request).
- `lock_due_schedules` hands each due schedule to one planner at a time (PostgreSQL: FOR UPDATE
  SKIP LOCKED; SQLite: one writer).
- `claim_due_runs` moves up to `limit` claimable runs to in_progress under `owner` until
  `lease_until` in one statement, each run to exactly one claimer (SKIP LOCKED); a pending run
  has next_attempt_at = scheduled_for, so it is never acquired early. A run taken over after its
  lease expired comes back with its lost attempt counted in `attempt_count` and recorded
  (`error_kind` worker_lost), in the same transaction (domain/run.py, "Lost attempts").
  Live runs are taken tenant-fair first; backfill runs only with what the claim has left.
  Each run comes with its schedule's delivery spec.
- `settle_leased` is a compare-and-set on the lease: a completion is written (run state, attempts,
  events) only while its run is still in_progress under the completion's owner; the others are
  dropped (LeaseLost) and their ids left out of the answer. The check and the writes are one
  transaction (PostgreSQL: one statement, rows locked in id order). It is the unit of work's one
  documented exception to "events become outbox rows at commit": the completions' events go in
  with the runs they belong to, in the same statement.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from scheduler.domain.definition import ScheduleDefinition, Target
from scheduler.domain.events import DomainEvent
from scheduler.domain.policies import (
    RESPONSE_COMPLETION,
    Action,
    CompletionPolicy,
    MisfirePolicy,
    OverlapPolicy,
    RetryPolicy,
)
from scheduler.domain.run import Attempt, AttemptOutcome, Run, RunStatus, Trigger
from scheduler.domain.tenant import DEFAULT_ENTITLEMENTS, Entitlements


@dataclass(frozen=True)
class ScheduleToPlan:
    """What the planner needs of one due schedule (locked for this transaction)."""

    id: str
    tenant_id: str
    definition: ScheduleDefinition
    next_run_at: datetime
    planned_runs: int
    version: int | None = None
    """The schedule's version (its runs cite it as `schedule_version`)."""


@dataclass(frozen=True)
class PlanUpdate:
    """What one pass changes on a planned schedule: its next_run_at and how many occurrences it
    planned (added to planned_runs)."""

    schedule_id: str
    next_run_at: datetime | None
    planned: int = 0


@dataclass(frozen=True)
class DeliverySpec:
    """What an attempt needs of the run's schedule, read when the run is claimed."""

    schedule_id: str
    tenant_id: str
    name: str
    action: Action
    active: bool
    deleted: bool
    target: Target | None
    retry_policy: RetryPolicy
    overlap_policy: OverlapPolicy
    secrets: tuple[str, ...] = field(repr=False)  # plaintext: never in a repr or a log
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    next_run_at: datetime | None = None
    """The schedule's first occurrence not yet planned (the claim's misfire rule reads it)."""
    completion: CompletionPolicy = RESPONSE_COMPLETION
    """What ends its runs: the 2xx, or a completion call (callback mode)."""


@dataclass(frozen=True)
class RunPageFilter:
    status: RunStatus | None = None
    scheduled_from: datetime | None = None
    scheduled_to: datetime | None = None
    trigger: Trigger | None = None
    schedule_id: str | None = None  # the tenant-wide list only; the per-schedule list has its own


@dataclass
class Completion:
    """A run moved in memory under `owner`'s lease, waiting to be written."""

    run: Run
    owner: str
    attempts: list[Attempt] = field(default_factory=list)
    events: list[DomainEvent] = field(default_factory=list)
    wakes_waiting: bool = False
    """Once terminal, the run makes its schedule's waiting run due (buffer_one; the claim's
    decision, domain/claiming.py)."""
    schedule_name: str | None = None
    """For the settle's log line (absent when the claim found no schedule)."""

    @classmethod
    def of(
        cls,
        run: Run,
        owner: str,
        extra_events: Sequence[DomainEvent] = (),
        *,
        wakes_waiting: bool = False,
        schedule_name: str | None = None,
    ) -> Completion:
        completion = cls(
            run,
            owner,
            list(run.new_attempts),
            [*run.events, *extra_events],
            wakes_waiting,
            schedule_name,
        )
        run.new_attempts.clear()
        run.events.clear()
        return completion


@dataclass(frozen=True)
class RunSummary:
    """What a schedule's page shows of its runs (`run_summaries`)."""

    last_finished: Run | None = None
    """The newest run by (scheduled_for, id) that succeeded or failed: a pending run planned
    ahead is not "last", nor is a skipped one (it says nothing about the target, and would hide
    the failure that paused a schedule)."""
    last_attempt: Attempt | None = None
    """`last_finished`'s last delivery attempt (its error and response excerpt)."""
    next_planned_at: datetime | None = None
    """The earliest scheduled_for of the schedule's planned runs still pending and never
    attempted (planned ahead, up to the planner's horizon)."""


@dataclass(frozen=True)
class ClaimedRuns:
    """One claim: the runs now leased to its owner, each one's schedule spec (absent: the
    schedule row is gone) and the lost attempts of runs taken over from a dead worker."""

    runs: list[Run]
    specs: dict[str, DeliverySpec]
    lease_expiries: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MisfireFacts:
    """What the claim's misfire rule reads (domain/claiming.py `ClaimRead`, same names)."""

    latest_missed: dict[str, datetime] = field(default_factory=dict)
    predecessor_finished: dict[str, datetime] = field(default_factory=dict)


class RunRepository(Protocol):
    # ---- planner -------------------------------------------------------------------------
    async def lock_due_schedules(self, horizon: datetime, limit: int) -> list[ScheduleToPlan]: ...

    async def unfinished_schedule_ids(self, schedule_ids: Sequence[str]) -> set[str]:
        """Those of the schedules whose some run is pending, in_progress or retrying."""
        ...

    async def insert_runs(self, runs: Sequence[Run]) -> int:
        """Insert; planned duplicates are ignored. Returns how many rows were new."""
        ...

    async def insert_new_runs(self, runs: Sequence[Run]) -> set[str]:
        """`insert_runs`, answering the ids of the rows that were new (a duplicate's is absent)."""
        ...

    async def set_next_run_at(self, updates: Sequence[PlanUpdate]) -> None: ...

    async def next_schedule_due_at(self) -> datetime | None:
        """The earliest next_run_at of an active, live schedule."""
        ...

    async def count_runs_by_tenant(
        self, tenant_ids: Sequence[str], start: datetime, end: datetime
    ) -> dict[str, int]:
        """Non-skipped runs per tenant with start <= created_at < end (max_runs_per_day: the
        runs a UTC day created, `start` its first instant); tenants without runs are absent.
        The count reserves each tenant's day until commit: another transaction counting the
        same tenant and day (a planner replica, a backfill) waits for it, so two cannot both
        spend the runs left (PostgreSQL: a transaction-level advisory lock per tenant and
        day, one per tenant whatever the runs are for; SQLite has one writer). Deadlock-free
        while callers count days in ascending order and nothing that holds a day waits for a
        lock a counter may hold (runs have no foreign key to their schedule row, which the
        planner holds)."""
        ...

    # ---- dispatcher ----------------------------------------------------------------------
    async def claim_due_runs(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> ClaimedRuns:
        """The claimed runs, with the delivery spec of each one's schedule read in the same
        statements where the database allows."""
        ...

    async def delivery_specs(
        self, schedule_ids: Sequence[str], now: datetime
    ) -> dict[str, DeliverySpec]: ...

    async def earlier_unfinished(
        self, runs: Sequence[Run], *, lock: bool = False, excluding: Collection[str] = ()
    ) -> dict[str, int]:
        """For those runs whose schedule has unfinished runs planned before them: how many
        (absent: none). overlap_policy skip needs "any"; buffer_one "one" (wait) or "more".
        `lock`: lock those earlier runs against change until commit, waiting for (and then
        re-reading) a concurrent write of them, so a predecessor settling meanwhile is seen.
        `excluding`: run ids not counted (the claim's own runs it is about to skip)."""
        ...

    async def misfire_facts(self, runs: Sequence[Run], missed_before: datetime) -> MisfireFacts:
        """For claimed runs that may be misfires (domain/claiming.py `misfire_candidates`): per
        schedule, the scheduled_for of its latest planned run, not skipped, due before
        `missed_before`; per run, when its schedule's previous run that was not skipped
        finished. One statement, each an index probe of (schedule_id, scheduled_for)."""
        ...

    async def predecessors_next_move(self, runs: Sequence[Run]) -> dict[str, datetime]:
        """For runs about to wait (buffer_one): when their schedule's earlier unfinished run next
        changes by itself: its lease's end while in_progress, else its next_attempt_at (absent:
        none unfinished, or it has no such time)."""
        ...

    async def wake_waiting(self, schedule_ids: Sequence[str], now: datetime) -> int:
        """Make those schedules' waiting runs (buffer_one: pending, put off past their due
        instant by `Run.wait`) due at `now`; never a run whose due instant is still ahead."""
        ...

    async def settle_leased(self, completions: Sequence[Completion]) -> set[str]:
        """For each completion whose run is still in_progress under its owner: store the run's
        state columns (status, attempts, times, lease), insert its attempts and its events
        (outbox, duplicates ignored), in completion order. Returns the ids written; the others
        are dropped (LeaseLost). Then the breaker's all-succeeded case: schedules among whose
        written runs some succeeded and none failed get consecutive_failures 0, reading and
        locking only those whose count is not 0 already."""
        ...

    async def extend_run_leases(
        self, leases: Sequence[tuple[str, str]], until: datetime
    ) -> int: ...

    async def next_run_due_at(self) -> datetime | None:
        """The earliest instant a run becomes claimable (due time or lease expiry)."""
        ...

    async def count_due(self, now: datetime) -> int: ...

    async def delivery_ms_of(self, run_ids: Sequence[str]) -> dict[str, int]:
        """The stored attempts' durations summed per run (runs without attempts are absent)."""
        ...

    # ---- completion callbacks (domain/run.py "Awaiting a completion") --------------------
    async def store_completion_token(self, run: Run, owner: str) -> bool:
        """Write the run's `completion_attempt` and `completion_token_hash` (and clear
        `completion_status`) while it is in_progress under `owner`; False: the lease is lost."""
        ...

    async def mark_awaiting(self, awaiting: Sequence[Run]) -> None:
        """Store the `completion_deadline` of runs this transaction's settle wrote awaiting."""
        ...

    async def lock_for_completion(self, run_id: str) -> Run | None:
        """The run by id alone (the caller proves the token), with its completion fields,
        locked until commit (a concurrent watchdog's write is waited for, then re-read)."""
        ...

    async def lock_overdue_awaiting(self, now: datetime, limit: int) -> list[Run]:
        """Up to `limit` runs awaiting a completion whose deadline is <= now, oldest deadline
        first, locked until commit; rows another transaction holds are skipped."""
        ...

    async def write_completion_ends(self, ended: Sequence[Run]) -> None:
        """Store the runs an end of awaiting moved (`Run.complete`, `Run.time_out`; locked by
        this transaction) and their `attempt_updates`. Events are the caller's (add_event)."""
        ...

    # ---- API -----------------------------------------------------------------------------
    async def get_run(self, tenant_id: str, schedule_id: str, run_id: str) -> Run | None: ...

    async def occurrences_with_runs(
        self, tenant_id: str, schedule_id: str, after: datetime, until: datetime
    ) -> set[datetime]:
        """The scheduled_for instants in (after, until] of the schedule's runs, any trigger."""
        ...

    async def list_runs(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        limit: int,
        before: tuple[datetime, str] | None,
        filters: RunPageFilter,
    ) -> list[Run]:
        """Newest first by (scheduled_for, id), strictly before `before`."""
        ...

    async def list_tenant_runs(
        self,
        tenant_id: str,
        *,
        limit: int,
        before: tuple[datetime, str] | None,
        filters: RunPageFilter,
    ) -> list[Run]:
        """The tenant's runs of live (not deleted) schedules, newest first like `list_runs`."""
        ...

    async def attempts_of(self, run_id: str) -> list[Attempt]: ...

    async def last_attempts_of(self, run_ids: Sequence[str]) -> dict[str, Attempt]:
        """Each run's newest attempt (one query for a page); runs never attempted are absent."""
        ...

    async def count_runs_by_bucket(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        start: datetime,
        end: datetime,
        bucket: Literal["hour", "day", "minute"],
    ) -> list[tuple[str, str, int]]:
        """(UTC bucket key `YYYY-MM-DD`, `YYYY-MM-DDTHH` or `YYYY-MM-DDTHH:MM`, status, count) of
        the schedule's runs with start <= scheduled_for < end: one GROUP BY over
        ix_runs_schedule_history."""
        ...

    async def last_run(self, tenant_id: str, schedule_id: str) -> Run | None:
        """The schedule's newest run by (scheduled_for, id)."""
        ...

    async def run_summaries(
        self, tenant_id: str, schedule_ids: Sequence[str]
    ) -> dict[str, RunSummary]:
        """Each schedule's RunSummary, for a page of schedules in a fixed number of queries
        (never one per schedule); a schedule without runs gets an empty summary."""
        ...

    # ---- retime and preview (domain/retime.py) ---------------------------------------------
    async def planned_after(self, tenant_id: str, schedule_id: str, after: datetime) -> int:
        """How many planned runs (trigger schedule, any status) have scheduled_for > after."""
        ...

    async def unattempted_planned_after(
        self, tenant_id: str, schedule_id: str, after: datetime
    ) -> list[datetime]:
        """The scheduled_for, increasing, of planned runs after `after` that are pending and
        were never attempted."""
        ...

    async def delete_unattempted_planned(
        self, tenant_id: str, schedule_id: str, instants: Sequence[datetime]
    ) -> int:
        """Delete those of them still pending and never attempted, and lower the schedule's
        planned_runs by as many (never below 0). Returns how many went."""
        ...


class TenantStatus(Protocol):
    """The tenant projections (DESIGN §6, §9): was the tenant suspended at `instant`, and its
    effective limits (the planner's max_runs_per_day budget)."""

    def suspended_at(self, tenant_id: str, instant: datetime) -> bool: ...

    def entitlements(self, tenant_id: str) -> Entitlements: ...


class NeverSuspended:
    """No projection: no tenant is ever suspended, everyone has the default limits."""

    def suspended_at(self, tenant_id: str, instant: datetime) -> bool:
        return False

    def entitlements(self, tenant_id: str) -> Entitlements:
        return DEFAULT_ENTITLEMENTS


@dataclass(frozen=True)
class ActionResult:
    """What performing a run's action produced: the attempt's outcome, plus events to write
    in the run's transaction (the event action's schedule.triggered)."""

    outcome: AttemptOutcome
    events: tuple[DomainEvent, ...] = ()


class ActionPerformer(Protocol):
    """Performs one attempt of a run's action. Never raises for delivery failures."""

    async def perform(
        self,
        run: Run,
        spec: DeliverySpec,
        attempt_number: int,
        *,
        completion_token: str | None = None,
    ) -> ActionResult:
        """`completion_token`: callback mode, the attempt's token (the webhook sends it with
        the run's completion URL; the dispatcher passes it only then)."""
        ...

    def concurrency_key(self, spec: DeliverySpec) -> str:
        """Runs with the same key share a per-key limit (webhook: the target's host:port)."""
        ...


__all__ = [
    "ActionPerformer",
    "ActionResult",
    "ClaimedRuns",
    "Completion",
    "DeliverySpec",
    "NeverSuspended",
    "RunPageFilter",
    "RunRepository",
    "ScheduleToPlan",
    "TenantStatus",
]
