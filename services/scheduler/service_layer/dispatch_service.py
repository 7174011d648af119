"""The run dispatcher: claim due runs, perform their action concurrently, settle results in
batches, on the one delivery discipline of both services
(`servicekit.runtime.pipeline.LeasedPipeline`: a continuous claim loop, per-key slots inside a
global cap, a batched writer, lease extension, graceful stop; read its docstring for the
mechanism). `RunDispatcher` owns that pipeline and hands it what is the scheduler's:

- the store, `RunLeases`: the runs repository's claim (tenant-fair) under the pipeline's owner
  token, what the claim-time decisions need read in the same transaction, then the decisions
  (`scheduler.domain.claiming.decide_claims`: attempt, skip, park or fail, in tenant turns); the
  write, `settle_completions` (compare-and-set on the lease; a lost lease drops the write and
  the run is redone: at-least-once, same X-Webhook-Id); lease extension; release at stop (the
  run is pending again, no attempt counted). A pending run is due at scheduled_for, so first
  attempts start within about the probe latency of it (the idle wait ends at
  `next_run_due_at`), never before. The slot key is the target's host
  (`ActionPerformer.concurrency_key`).
- the attempt, `RunDispatcher.attempt`: the action performer, its outcome recorded on the run
  with the retry delay.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from scheduler.domain.claiming import (
    ClaimedRun,
    ClaimRead,
    Verdict,
    decide_claims,
    may_wait,
    misfire_candidates,
    misfired,
    overlap_candidates,
)
from scheduler.domain.events import DomainEvent
from scheduler.domain.planning import DEFAULT_MISFIRE_GRACE
from scheduler.domain.policies import Action
from scheduler.domain.run import DEFAULT_MAX_LEASE_EXPIRIES, AttemptOutcome, Run, Trigger
from scheduler.service_layer.completion_tokens import issue_completion_token
from scheduler.service_layer.flow_control import Answer, FlowGate
from scheduler.service_layer.run_log import RunLog
from scheduler.service_layer.run_ports import (
    ActionPerformer,
    DeliverySpec,
    MisfireFacts,
    NeverSuspended,
    RunRepository,
    TenantStatus,
)
from scheduler.service_layer.settle import Completion, settle_completions
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from servicekit.data.ids import new_id
from servicekit.flow import DestinationPolicy
from servicekit.runtime.pipeline import Lease, LeasedPipeline, PipelineSettings
from webhookdeliver import BackoffPolicy, endpoint_key

log = logging.getLogger("scheduler.dispatcher")
Clock = Callable[[], datetime]
DispatchSettings = PipelineSettings
"""The dispatcher's settings are the pipeline's (concurrency, per-key limit, claim batch, lease,
idle poll, write batch, retry backoff)."""
RunLease = Lease[ClaimedRun[DeliverySpec], Completion]


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
    # The time flow control kept it back is not the retries' (DESIGN §7b: a held run).
    return backoff_of(spec).next_delay(
        run.attempt_count + 1,
        max((now - first).total_seconds() - run.held_seconds, 0.0),
        retry_after=outcome.retry_after_seconds,
        rng=rng,
    )


class RunLeases:
    """The runs' `LeaseStore` (servicekit.runtime.pipeline): the claim and its decisions, the
    settle, lease extension and release."""

    def __init__(
        self,
        uows: UnitOfWorkFactory,
        concurrency_key: Callable[[DeliverySpec], str],
        clock: Clock,
        *,
        tenants: TenantStatus,
        observer: DispatchObserver,
        run_log: RunLog | None = None,
        max_lease_expiries: int = DEFAULT_MAX_LEASE_EXPIRIES,
        misfire_grace: timedelta = DEFAULT_MISFIRE_GRACE,
        flow: FlowGate | None = None,
    ) -> None:
        self.uows = uows
        self.flow = flow or FlowGate(_endpoint_of)
        self.concurrency_key = concurrency_key
        self.clock = clock
        self.tenants = tenants
        self.observer = observer
        self.run_log = run_log or RunLog()
        self.max_lease_expiries = max_lease_expiries
        self.misfire_grace = misfire_grace

    async def acquire(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[RunLease]:
        async with self.uows() as uow:
            repo = uow.runs
            claim = await repo.claim_due_runs(owner, now, lease_until, limit)
            claimed, specs = claim.runs, claim.specs
            if not claimed:
                return []
            # The overlap check does not count the runs the misfire rule ends.
            facts, ended = await self._misfires(repo, claimed, specs, now)
            live = [r for r in claimed if r.id not in ended] if ended else claimed
            earlier = await repo.earlier_unfinished(
                overlap_candidates(live, specs), excluding=ended
            )
            # Those that may park: until when (one query, only when some may).
            waiting = may_wait(claimed, specs, earlier)
            moves = await repo.predecessors_next_move(waiting) if waiting else {}
            # A retried run's earlier attempts are only in delivery_attempts: their time goes
            # into its terminal event's delivery_ms (one query, only when retries were claimed).
            retried = [r.id for r in claimed if r.attempt_count]
            spent = await repo.delivery_ms_of(retried) if retried else {}
            read = ClaimRead(
                specs,
                earlier,
                moves,
                claim.lease_expiries,
                spent,
                facts.latest_missed,
                facts.predecessor_finished,
            )
            decided = decide_claims(
                claimed,
                read,
                now=now,
                endpoint_of=_endpoint_of,
                tenant_suspended_at=self.tenants.suspended_at,
                max_lease_expiries=self.max_lease_expiries,
                misfire_grace=self.misfire_grace,
            )
            # Flow control: the attempts a destination's limits do not let start now are
            # pending again in this transaction (service_layer/flow_control.py).
            decided = await self.flow.admit_claimed(uow, decided, owner, now)
            await uow.commit()
        keys: dict[str, str] = {}  # schedule id -> concurrency key, once per claim
        leases: list[RunLease] = []
        for c in decided:
            run = c.run
            if c.verdict is Verdict.ATTEMPT:
                assert c.spec is not None
                key = keys.get(run.schedule_id)
                if key is None:
                    key = keys[run.schedule_id] = self.concurrency_key(c.spec)
                # A gated destination's limit is the gate's: no slot of the pipeline caps it.
                slots = key if self.flow.local(c) else f"{key}#{run.id}"
                leases.append(Lease.attempt(run.id, c, slots))
                continue
            c.conclude(owner, now)
            if c.lost is not None:
                self._report_lost(c)
            name = None if c.spec is None else c.spec.name
            done = Completion.of(run, owner, wakes_waiting=c.wakes_waiting, schedule_name=name)
            leases.append(Lease.decided(run.id, c, done))
        return leases

    async def _misfires(
        self, repo: RunRepository, claimed: list[Run], specs: dict[str, DeliverySpec], now: datetime
    ) -> tuple[MisfireFacts, set[str]]:
        """What the misfire rule reads, and the ids of the runs it skips: one query, only when
        some runs were claimed later than the grace (after an outage or a backlog)."""
        grace = self.misfire_grace
        late = misfire_candidates(claimed, specs, now=now, misfire_grace=grace)
        if not late:
            return MisfireFacts(), set()
        facts = await repo.misfire_facts(late, now - grace)
        read = ClaimRead(
            specs,
            latest_missed=facts.latest_missed,
            predecessor_finished=facts.predecessor_finished,
        )
        return facts, misfired(claimed, read, now=now, misfire_grace=grace)

    def _report_lost(self, c: ClaimedRun[DeliverySpec]) -> None:
        """A poison run (its workers keep dying) fails instead of being claimed again: loud once."""
        reason = str(c.lost)
        self.observer.worker_lost(reason)
        log.warning(
            "run %s of schedule %s failed worker_lost (%s): lease expired %d times, %d attempts",
            c.run.id,
            c.run.schedule_id,
            reason,
            c.lease_expiries,
            c.run.attempt_count,
        )

    async def write(self, completions: Sequence[Completion]) -> list[str]:
        now = self.clock()
        answers = self.flow.take([c.run.id for c in completions])
        report = await settle_completions(
            self.uows,
            completions,
            now,
            # Runs deferred for the slots these free are due at once, in the same commit.
            before_commit=lambda uow, written: self.flow.wake_waiters(uow, written, now),
        )
        self.flow.forget(report.lost)
        self.run_log.settled(completions, report.lost, now)
        await self._react(answers, set(report.lost), now)
        if report.paused:
            tenant_of = {c.run.schedule_id: c.run.tenant_id for c in completions}
            for schedule_id in report.paused:
                self.observer.breaker_tripped(tenant_of[schedule_id])
            self.run_log.paused(completions, report.paused)
        return report.lost

    async def _react(self, answers: list[Answer], lost: set[str], now: datetime) -> None:
        """The destinations' signals in these answers (flow_control.FlowGate.react). Best
        effort: the runs are written; a failure here only delays the adaptation."""
        if not answers:
            return
        try:
            await self.flow.react(self.uows, answers, now)
        except Exception as exc:
            log.warning("flow control could not record %d answers (%s)", len(answers), exc)

    async def extend(self, leases: Sequence[tuple[str, str]], until: datetime) -> int:
        async with self.uows() as uow:
            n = await uow.runs.extend_run_leases(leases, until)
            await uow.commit()
        return n

    def release(self, lease: RunLease, owner: str, now: datetime) -> Completion | None:
        run = lease.item.run
        if not run.holds_lease(owner):
            return None
        run.release(owner, now)
        return Completion.of(run, owner)

    async def next_due_at(self) -> datetime | None:
        async with self.uows() as uow:
            return await uow.runs.next_run_due_at()


class RunDispatcher:
    """The runs' worker: owns the `LeasedPipeline` (`pipeline`: `run`, `stop`, `wake`, and the
    step-by-step controls for tests), hands it its store, `RunLeases` (`leases`), and `attempt`."""

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
        run_log: RunLog | None = None,
        rng: random.Random | None = None,
        max_lease_expiries: int = DEFAULT_MAX_LEASE_EXPIRIES,
        misfire_grace: timedelta = DEFAULT_MISFIRE_GRACE,
        destination_per_second: float | None = None,
    ) -> None:
        self.performer = performer
        self.clock = clock
        self.settings = settings or DispatchSettings()
        # `per_key_limit` is a destination's default in-flight limit: held by each worker's own
        # per-key slots while the destination has no row (no policy, no state: no database
        # work per claim), by the gate across every worker once it has one (flow_control.py).
        self.flow = FlowGate(
            _endpoint_of,
            DestinationPolicy(self.settings.per_key_limit, destination_per_second),
        )
        self.worker_id = worker_id or new_id("wrk")
        self.observer: DispatchObserver = observer or _NoMetrics()
        self.rng = rng or random.Random()
        self.leases = RunLeases(
            uows,
            performer.concurrency_key,
            clock,
            tenants=tenants or NeverSuspended(),
            observer=self.observer,
            run_log=run_log,
            max_lease_expiries=max_lease_expiries,
            misfire_grace=misfire_grace,
            flow=self.flow,
        )
        self.pipeline: LeasedPipeline[ClaimedRun[DeliverySpec], Completion] = LeasedPipeline(
            self.leases,
            self.attempt,
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

    async def attempt(self, claimed: ClaimedRun[DeliverySpec], owner: str) -> Completion:
        """One attempt of a run the claim decided to attempt (runs inside its slots)."""
        run, spec = claimed.run, claimed.spec
        assert spec is not None
        token = None
        if spec.completion.is_callback and spec.action is Action.WEBHOOK:
            token = await issue_completion_token(self.leases.uows, run, owner)
            if token is None:  # the lease is lost: deliver nothing, the settle drops this
                return Completion.of(run, owner)
        outcome, extra = await self._perform(run, spec, token)
        now = self.clock()
        dest = _endpoint_of(spec)
        if dest is not None and outcome.status_code is not None:
            answer = Answer(
                (run.tenant_id, dest),
                outcome.started_at,
                outcome.status_code,
                outcome.retry_after_seconds,
            )
            self.flow.note(run.id, answer, (now - outcome.started_at).total_seconds())
        delay = retry_delay(run, spec, outcome, now, self.rng)
        await_until = _completion_deadline(spec, now) if token is not None else None
        run.record_attempt(owner, outcome, now, delay, claimed.facts, await_until=await_until)
        self.observer.attempt(_outcome_label(outcome))
        return Completion.of(
            run, owner, extra, wakes_waiting=claimed.wakes_waiting, schedule_name=spec.name
        )

    async def _perform(
        self, run: Run, spec: DeliverySpec, completion_token: str | None = None
    ) -> tuple[AttemptOutcome, tuple[DomainEvent, ...]]:
        start = self.clock()
        if run.attempt_count == 0 and run.trigger is Trigger.SCHEDULE:
            # From due_at: a jittered run is not late for starting after its occurrence.
            self.observer.first_attempt_lag((start - run.due).total_seconds())
        try:
            number = run.attempt_count + 1
            if completion_token is None:
                result = await self.performer.perform(run, spec, number)
            else:
                result = await self.performer.perform(
                    run, spec, number, completion_token=completion_token
                )
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


def _completion_deadline(spec: DeliverySpec, accepted_at: datetime) -> datetime:
    """Callback mode: an accepted attempt awaits its completion call until then."""
    assert spec.completion.timeout_seconds is not None
    return accepted_at + timedelta(seconds=spec.completion.timeout_seconds)


def _endpoint_of(spec: DeliverySpec) -> str | None:
    return None if spec.target is None else endpoint_key(spec.target.url)


def _outcome_label(outcome: AttemptOutcome) -> str:
    if outcome.ok:
        return "succeeded"
    return outcome.error_kind or "error"
