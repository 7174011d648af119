"""The run dispatcher: claim due runs, perform their action concurrently, settle results in
batches, on the one delivery discipline of both services
(`servicekit.runtime.pipeline.LeasedPipeline`:
a continuous claim loop, per-key slots inside a global cap, a batched writer, lease extension,
graceful stop; read its docstring for the mechanism). `RunDispatcher` is that pipeline's store
and supplies what is the scheduler's:

- acquire: the runs repository's claim (tenant-fair) under the pipeline's owner token, then the
  claim-time checks, and attempts ordered tenant by tenant in turn (`tenant_round_robin`) so one
  tenant's many runs in a claim do not all take the slots before another tenant's. A pending run
  is due at scheduled_for, so first attempts start within about the probe latency of it (the
  idle wait ends at `next_run_due_at`), never before. The slot key is the target's host
  (`ActionPerformer.concurrency_key`).
- the attempt: the action performer, its outcome recorded on the run with the retry delay.
- write: `settle_completions` (compare-and-set on the lease; a lost lease drops the write and the
  run is redone: at-least-once, same X-Webhook-Id).
- release at stop: the run is pending again, no attempt counted.

Claim-time checks (the planner cannot know them when it plans ahead): a run of a deleted
schedule is skipped `schedule_deleted`; a planned run of a paused schedule `schedule_paused`
(manual runs and replays of a paused schedule are delivered: a tenant asked for them); a tenant
suspended at scheduled_for (for a retry: now) `tenant_suspended`; overlap_policy skip with an
earlier unfinished run `overlap`; buffer_one with one earlier unfinished run waits (`Run.wait`:
pending again, due when that run finishes, parked until it next moves by itself or
`BUFFER_RECHECK` at the latest), with two (one running, one waiting) `overlap`. A run whose
lease expired `max_lease_expiries` times (its lost attempts, counted by the claim), or whose
lost attempt was the retry policy's last (attempt_count = max_attempts), fails `worker_lost`
instead of being attempted again.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from scheduler.domain.events import DomainEvent
from scheduler.domain.policies import OverlapPolicy
from scheduler.domain.run import (
    DEFAULT_MAX_LEASE_EXPIRIES,
    AttemptOutcome,
    Run,
    SkipReason,
    Trigger,
)
from scheduler.service_layer.run_ports import (
    ActionPerformer,
    DeliverySpec,
    NeverSuspended,
    TenantStatus,
)
from scheduler.service_layer.settle import Completion, settle_completions
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from servicekit.data.ids import new_id
from servicekit.runtime.pipeline import Lease, LeasedPipeline, LeasedWorker, PipelineSettings
from webhookdeliver import BackoffPolicy, endpoint_key

log = logging.getLogger("scheduler.dispatcher")
Clock = Callable[[], datetime]
DispatchSettings = PipelineSettings
"""The dispatcher's settings are the pipeline's (concurrency, per-key limit, claim batch, lease,
idle poll, write batch, retry backoff)."""
RunLease = Lease[Run, Completion]
# A buffer_one run waiting for its predecessor is parked until that run next moves by itself (a
# retry, a lease's end), this at the latest: its finishing, however it finishes, makes the
# waiting run due at once (settle: `wake_waiting`, which also covers a predecessor that finished
# while the waiting run was being put back), so this is only a safety recheck, not a poll.
BUFFER_RECHECK = timedelta(seconds=60)


class DispatchObserver(Protocol):
    """Metrics seam (the worker entrypoint implements it with Prometheus)."""

    def first_attempt_lag(self, seconds: float) -> None: ...

    def attempt(self, outcome: str) -> None: ...

    def settled(self, count: int, lost: int) -> None: ...

    def breaker_tripped(self, tenant_id: str) -> None: ...

    def worker_lost(self, reason: str) -> None: ...


class _NoMetrics:
    def first_attempt_lag(self, seconds: float) -> None:
        return None

    def attempt(self, outcome: str) -> None:
        return None

    def settled(self, count: int, lost: int) -> None:
        return None

    def breaker_tripped(self, tenant_id: str) -> None:
        return None

    def worker_lost(self, reason: str) -> None:
        return None


def backoff_of(spec: DeliverySpec) -> BackoffPolicy:
    p = spec.retry_policy
    return BackoffPolicy(
        initial_seconds=p.initial_backoff_seconds,
        max_seconds=p.max_backoff_seconds,
        multiplier=p.multiplier,
        max_attempts=p.max_attempts,
        max_elapsed_seconds=p.max_retry_duration_seconds,
    )


def retry_delay(
    run: Run, spec: DeliverySpec, outcome: AttemptOutcome, now: datetime, rng: random.Random
) -> float | None:
    """Seconds until the next attempt, or None when it will not be retried (DESIGN §6)."""
    if outcome.ok or not outcome.retryable:
        return None
    first = run.started_at or now
    return backoff_of(spec).next_delay(
        run.attempt_count + 1,
        max((now - first).total_seconds(), 0.0),
        retry_after=outcome.retry_after_seconds,
        rng=rng,
    )


class RunDispatcher(LeasedWorker[Run, Completion]):
    """The runs' `LeasedPipeline`, whose store is this dispatcher (`acquire`, `write`, `extend`,
    `release`, `next_due_at`); `LeasedWorker` gives it the pipeline's controls (`run`, `stop`,
    `wake`, and `pump`, `drain`, `write_once`, `extend_leases_once` for tests)."""

    def __init__(
        self,
        uows: UnitOfWorkFactory,
        performer: ActionPerformer,
        clock: Clock,
        *,
        settings: DispatchSettings | None = None,
        worker_id: str | None = None,
        tenants: TenantStatus | None = None,
        observer: DispatchObserver | None = None,
        rng: random.Random | None = None,
        max_lease_expiries: int = DEFAULT_MAX_LEASE_EXPIRIES,
    ) -> None:
        self.uows = uows
        self.max_lease_expiries = max_lease_expiries
        self.performer = performer
        self.clock = clock
        self.settings = settings or DispatchSettings()
        self.worker_id = worker_id or new_id("wrk")
        self.tenants = tenants or NeverSuspended()
        self.observer: DispatchObserver = observer or _NoMetrics()
        self.rng = rng or random.Random()
        self.pipeline: LeasedPipeline[Run, Completion] = LeasedPipeline(
            self,
            clock,
            settings=self.settings,
            new_owner=self._new_owner,
            name="dispatcher",
            outage="database unavailable",
            logger=log,
            on_written=self.observer.settled,
        )

    def _new_owner(self, now: datetime) -> str:
        return f"{self.worker_id}:{new_id('lse', at=now)}"

    def _report_lost(self, run: Run, reason: str) -> None:
        """A poison run (its workers keep dying) fails instead of being claimed again: loud once."""
        self.observer.worker_lost(reason)
        log.warning(
            "run %s of schedule %s failed worker_lost (%s): lease expired %d times, %d attempts",
            run.id,
            run.schedule_id,
            reason,
            run.lease_expiries,
            run.attempt_count,
        )

    # ---- the pipeline's store (servicekit.runtime.pipeline.LeaseStore)
    # -----------------------------

    async def acquire(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[RunLease]:
        async with self.uows() as uow:
            tx = uow.runs
            claimed, specs = await tx.claim_due_runs(owner, now, lease_until, limit)
            if not claimed:
                return []
            candidates = [
                r
                for r in claimed
                if r.trigger is Trigger.SCHEDULE
                and (spec := specs.get(r.schedule_id)) is not None
                and spec.overlap_policy is not OverlapPolicy.ALLOW
            ]
            earlier = await tx.earlier_unfinished(candidates)
            # Those that may wait (buffer_one, one earlier unfinished): until when (one query,
            # only when some may).
            may_wait = [r for r in candidates if self._waits(r, specs[r.schedule_id], earlier)]
            moves = await tx.predecessors_next_move(may_wait) if may_wait else {}
            # A retried run's earlier attempts are only in delivery_attempts: their time goes
            # into its terminal event's delivery_ms (one query, only when retries were claimed).
            retried = [r for r in claimed if r.attempt_count]
            spent = await tx.delivery_ms_of([r.id for r in retried]) if retried else {}
            await uow.commit()
        for run in retried:
            run.delivery_ms = spent.get(run.id, 0)
        keys: dict[str, str] = {}  # schedule id -> endpoint key, computed once per claim
        leases: list[RunLease] = []
        for run in tenant_round_robin(claimed):
            spec = specs.get(run.schedule_id)
            if spec is not None and spec.target is not None:
                run.endpoint = endpoint_key(spec.target.url)  # for the run's terminal event
            # Every run of a buffer_one schedule that finishes wakes its waiting run, except a
            # skip for overlap (the run that blocks it still runs).
            buffer_one = spec is not None and spec.overlap_policy is OverlapPolicy.BUFFER_ONE
            if run.lease_expiries >= self.max_lease_expiries:
                run.fail_lost(owner, now)
                self._report_lost(run, "lease_expiries")
                run.wakes_waiting = buffer_one
                leases.append(Lease.decided(run.id, run, Completion.of(run, owner)))
                continue
            if spec is not None and _lost_the_last_attempt(run, spec):
                run.fail_lost(owner, now, max_attempts=spec.retry_policy.max_attempts)
                self._report_lost(run, "max_attempts")
                run.wakes_waiting = buffer_one
                leases.append(Lease.decided(run.id, run, Completion.of(run, owner)))
                continue
            reason = self._skip_reason(run, spec, earlier, now)
            if reason is None and spec is not None and self._waits(run, spec, earlier):
                run.wait(owner, _wait_until(moves.get(run.id), now))
                leases.append(Lease.decided(run.id, run, Completion.of(run, owner)))
                continue
            if reason is not None or spec is None:
                run.skip(reason or SkipReason.SCHEDULE_DELETED, now, owner=owner)
                run.wakes_waiting = buffer_one and reason is not SkipReason.OVERLAP
                leases.append(Lease.decided(run.id, run, Completion.of(run, owner)))
                continue
            run.wakes_waiting = buffer_one
            key = keys.get(spec.schedule_id)
            if key is None:
                key = keys[spec.schedule_id] = self.performer.concurrency_key(spec)
            leases.append(Lease.attempt(run.id, run, key, self._attempt_of(run, spec, owner)))
        return leases

    @staticmethod
    def _waits(run: Run, spec: DeliverySpec, earlier: dict[str, int]) -> bool:
        """buffer_one: exactly one earlier run unfinished (the one running): this one waits."""
        return (
            spec.overlap_policy is OverlapPolicy.BUFFER_ONE
            and run.attempt_count == 0
            and earlier.get(run.id, 0) == 1
        )

    def _skip_reason(
        self, run: Run, spec: DeliverySpec | None, earlier: dict[str, int], now: datetime
    ) -> SkipReason | None:
        if spec is None or spec.deleted:
            return SkipReason.SCHEDULE_DELETED
        if run.trigger is Trigger.SCHEDULE and not spec.active:
            return SkipReason.SCHEDULE_PAUSED
        judged_at = run.scheduled_for if run.attempt_count == 0 else now
        if self.tenants.suspended_at(run.tenant_id, judged_at):
            return SkipReason.TENANT_SUSPENDED
        # skip: any earlier run unfinished; buffer_one: one runs and another already waits.
        n = earlier.get(run.id, 0)
        if spec.overlap_policy is OverlapPolicy.SKIP and n >= 1:
            return SkipReason.OVERLAP
        if spec.overlap_policy is OverlapPolicy.BUFFER_ONE and run.attempt_count == 0 and n >= 2:
            return SkipReason.OVERLAP
        return None

    def _attempt_of(
        self, run: Run, spec: DeliverySpec, owner: str
    ) -> Callable[[], Awaitable[Completion]]:
        async def attempt() -> Completion:
            outcome, extra = await self._perform(run, spec)
            now = self.clock()
            run.record_attempt(owner, outcome, now, retry_delay(run, spec, outcome, now, self.rng))
            self.observer.attempt(_outcome_label(outcome))
            return Completion.of(run, owner, extra)

        return attempt

    async def _perform(
        self, run: Run, spec: DeliverySpec
    ) -> tuple[AttemptOutcome, tuple[DomainEvent, ...]]:
        """Runs inside the run's slots (the pipeline holds them)."""
        start = self.clock()
        if run.attempt_count == 0 and run.trigger is Trigger.SCHEDULE:
            # From due_at: a jittered run is not late for starting after its occurrence.
            self.observer.first_attempt_lag((start - run.due).total_seconds())
        try:
            result = await self.performer.perform(run, spec, run.attempt_count + 1)
        except Exception as exc:  # a bug in a performer must not lose the run
            log.exception("action performer failed for run %s", run.id)
            outcome = AttemptOutcome(
                ok=False,
                started_at=start,
                duration_ms=0,
                error_kind="internal",
                error_message=f"{type(exc).__name__}",
                retryable=True,
            )
            return outcome, ()
        return result.outcome, tuple(result.events)

    async def write(self, completions: Sequence[Completion]) -> list[str]:
        report = await settle_completions(self.uows, completions, self.clock())
        if report.paused:
            tenant_of = {c.run.schedule_id: c.run.tenant_id for c in completions}
            for schedule_id in report.paused:
                self.observer.breaker_tripped(tenant_of[schedule_id])
        return report.lost

    async def extend(self, leases: Sequence[tuple[str, str]], until: datetime) -> int:
        async with self.uows() as uow:
            n = await uow.runs.extend_run_leases(leases, until)
            await uow.commit()
        return n

    def release(self, lease: RunLease, owner: str, now: datetime) -> Completion | None:
        run = lease.item
        if not run.holds_lease(owner):
            return None
        run.release(owner, now)
        return Completion.of(run, owner)

    async def next_due_at(self) -> datetime | None:
        async with self.uows() as uow:
            return await uow.runs.next_run_due_at()


def _wait_until(predecessor_moves_at: datetime | None, now: datetime) -> datetime:
    """A waiting run is due again when its predecessor next moves by itself (its retry, or its
    lease's end if its worker died), BUFFER_RECHECK at the latest; its finishing wakes it sooner."""
    latest = now + BUFFER_RECHECK
    at = predecessor_moves_at
    return at if at is not None and now < at < latest else latest


def _lost_the_last_attempt(run: Run, spec: DeliverySpec) -> bool:
    """Taken over from a lost worker (this claim counted its attempt: `lease_expiries` > 0) with
    the retry policy's attempts used up: another would go out as X-Attempt max_attempts + 1."""
    return run.lease_expiries > 0 and run.attempt_count >= spec.retry_policy.max_attempts


def tenant_round_robin(claimed: Sequence[Run]) -> list[Run]:
    """Start attempts one tenant at a time in turn (each tenant's runs oldest first), so one
    tenant's many runs in a claim do not all take the slots before another tenant's."""
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


def _outcome_label(outcome: AttemptOutcome) -> str:
    if outcome.ok:
        return "succeeded"
    return outcome.error_kind or "error"
