"""The dispatcher: claim due runs, perform their action concurrently, settle results in batches.

A continuous pipeline, never batch-and-wait (so one slow tenant endpoint cannot stall others):

    claim loop --(spawn one task per run)--> delivery tasks --(completion queue)--> writer
        ^                                                                              |
        +---------------------- capacity freed / wake-up ------------------------------+

- The claim loop claims up to `claim_batch` runs whenever at least `refill_room` fewer than
  `max_claimed` runs are held (so claims stay large while slots stay busy), tenants taking turns
  (the runs repository's claim is tenant-fair, and attempts start in tenant round-robin order),
  and otherwise sleeps until the earliest due time (probed from the database), a wake-up (the
  in-process planner or the API signal new work) or `idle_poll_seconds` at most (runs inserted by
  other processes). A pending run is due at scheduled_for, so first attempts start within about
  the probe latency of it, never before.
- Each delivery waits for a per-key slot (the target's host: one endpoint gets at most
  `per_key_limit` concurrent attempts) and then a global slot (`concurrency`). A hanging endpoint
  holds its own key's slots, not the others'.
- The writer drains whatever completions have accumulated (up to `write_batch`) and settles them
  in one transaction while the next group accumulates.
- A side task extends the leases of every held run every `lease_seconds / 3`, so a slow attempt
  keeps its run, and a run whose worker died is claimable again within `lease_seconds`.
- Database errors: the claim loop and the writer back off exponentially (bounded) and retry;
  completions are kept until written (or their lease is lost, and the run is redone:
  at-least-once, same X-Webhook-Id).
- `stop(grace)`: stop claiming, let in-flight attempts finish for up to `grace` seconds, release
  the rest (pending again, no attempt counted), flush the writer.

Claim-time checks (the planner cannot know them when it plans ahead): a run of a deleted
schedule is skipped `schedule_deleted`; a planned run of a paused schedule `schedule_paused`
(manual runs and replays of a paused schedule are delivered: a tenant asked for them); a tenant
suspended at scheduled_for (for a retry: now) `tenant_suspended`; overlap_policy skip with an
earlier unfinished run `overlap`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from scheduler.domain.events import DomainEvent
from scheduler.domain.ids import new_id
from scheduler.domain.policies import OverlapPolicy
from scheduler.domain.run import AttemptOutcome, Run, SkipReason, Trigger
from scheduler.service_layer.run_ports import (
    ActionPerformer,
    DeliverySpec,
    NeverSuspended,
    TenantStatus,
)
from scheduler.service_layer.settle import Completion, settle_completions
from scheduler.service_layer.unit_of_work import UnitOfWorkFactory
from servicekit.errors import is_transient
from servicekit.worker import Step, WorkerLoop
from webhookdeliver import BackoffPolicy

log = logging.getLogger("scheduler.dispatcher")
Clock = Callable[[], datetime]
MIN_IDLE_SECONDS = 0.02


class DispatchObserver(Protocol):
    """Metrics seam (the worker entrypoint implements it with Prometheus)."""

    def first_attempt_lag(self, seconds: float) -> None: ...

    def attempt(self, outcome: str) -> None: ...

    def settled(self, count: int, lost: int) -> None: ...


class _NoMetrics:
    def first_attempt_lag(self, seconds: float) -> None:
        return None

    def attempt(self, outcome: str) -> None:
        return None

    def settled(self, count: int, lost: int) -> None:
        return None


@dataclass
class DispatchSettings:
    concurrency: int = 64
    """Attempts in flight at once (all endpoints)."""
    per_key_limit: int = 10
    """Attempts in flight at once to one endpoint (host:port)."""
    claim_batch: int = 100
    max_claimed: int = 0
    """Runs held (claimed, not yet settled) at most; 0 means 2 x concurrency."""
    lease_seconds: float = 30.0
    idle_poll_seconds: float = 1.0
    write_batch: int = 500
    db_retry_initial_seconds: float = 0.2
    db_retry_max_seconds: float = 5.0

    @property
    def held_limit(self) -> int:
        return self.max_claimed or 2 * self.concurrency

    @property
    def refill_room(self) -> int:
        """Claim again only once this many runs can be taken: half the runs held beyond the
        attempt slots (at least 1, at most half a claim batch). Fewer, larger claims cost less
        per run, and the runs still held keep every slot busy meanwhile."""
        spare = self.held_limit - self.concurrency
        return max(1, min(self.claim_batch, spare) // 2)


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


@dataclass
class _Held:
    run: Run
    owner: str
    task: asyncio.Task[None] | None = None


class RunDispatcher:
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
    ) -> None:
        self.uows = uows
        self.performer = performer
        self.clock = clock
        self.settings = settings or DispatchSettings()
        self.worker_id = worker_id or new_id("wrk")
        self.tenants = tenants or NeverSuspended()
        self.observer: DispatchObserver = observer or _NoMetrics()
        self.rng = rng or random.Random()
        self._held: dict[str, _Held] = {}
        self._queue: asyncio.Queue[Completion | None] = asyncio.Queue()  # None: writer stops
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._slots = asyncio.Semaphore(self.settings.concurrency)
        self._key_slots: dict[str, asyncio.Semaphore] = {}
        self._key_users: dict[str, int] = {}
        self._stopping = False
        # The loops of run(); a dispatcher driven step by step (tests) has none.
        self._claims: WorkerLoop | None = None
        self._writer: WorkerLoop | None = None
        self._side_loops: list[WorkerLoop] = []
        self._side_tasks: list[asyncio.Task[None]] = []
        self._writing: list[Completion] = []  # the writer's batch, kept across a retry
        self._writer_closing = False

    # ---- signals --------------------------------------------------------------------------

    def wake(self) -> None:
        """New work may be due (the planner inserted runs, the API triggered one)."""
        self._wake.set()

    @property
    def held(self) -> int:
        return len(self._held)

    # ---- one step (tests drive these with a manual clock) ----------------------------------

    async def pump(self) -> tuple[int, int]:
        """Claim once and start the attempts. Returns (claimed, asked)."""
        room = self.settings.held_limit - len(self._held)
        if room <= 0 or self._stopping:
            return 0, 0
        asked = min(room, self.settings.claim_batch)
        now = self.clock()
        owner = f"{self.worker_id}:{new_id('lse', at=now)}"
        lease_until = now + timedelta(seconds=self.settings.lease_seconds)
        async with self.uows() as uow:
            tx = uow.runs
            claimed = await tx.acquire_due_runs(owner, now, lease_until, asked)
            if not claimed:
                return 0, asked
            specs = await tx.delivery_specs([r.schedule_id for r in claimed], now)
            candidates = [
                r
                for r in claimed
                if r.trigger is Trigger.SCHEDULE
                and (spec := specs.get(r.schedule_id)) is not None
                and spec.overlap_policy is OverlapPolicy.SKIP
            ]
            overlapped = await tx.earlier_unfinished(candidates)
            await uow.commit()
        keys: dict[str, str] = {}  # schedule id -> endpoint key, computed once per claim
        for run in tenant_round_robin(claimed):
            held = _Held(run, owner)
            self._held[run.id] = held
            spec = specs.get(run.schedule_id)
            reason = self._skip_reason(run, spec, overlapped, now)
            if reason is not None or spec is None:
                run.skip(reason or SkipReason.SCHEDULE_DELETED, now, owner=owner)
                self._queue.put_nowait(Completion.of(run, owner))
                continue
            key = keys.get(spec.schedule_id)
            if key is None:
                key = keys[spec.schedule_id] = self.performer.concurrency_key(spec)
            held.task = asyncio.create_task(self._attempt(run, spec, owner, key))
        return len(claimed), asked

    def _skip_reason(
        self, run: Run, spec: DeliverySpec | None, overlapped: set[str], now: datetime
    ) -> SkipReason | None:
        if spec is None or spec.deleted:
            return SkipReason.SCHEDULE_DELETED
        if run.trigger is Trigger.SCHEDULE and not spec.active:
            return SkipReason.SCHEDULE_PAUSED
        judged_at = run.scheduled_for if run.attempt_count == 0 else now
        if self.tenants.suspended_at(run.tenant_id, judged_at):
            return SkipReason.TENANT_SUSPENDED
        if run.id in overlapped:
            return SkipReason.OVERLAP
        return None

    def _key_slot(self, key: str) -> asyncio.Semaphore:
        sem = self._key_slots.get(key)
        if sem is None:
            sem = self._key_slots[key] = asyncio.Semaphore(self.settings.per_key_limit)
        return sem

    async def _attempt(self, run: Run, spec: DeliverySpec, owner: str, key: str) -> None:
        key_slot = self._key_slot(key)
        self._key_users[key] = self._key_users.get(key, 0) + 1
        try:
            outcome, extra = await self._perform(run, spec, key_slot)
        finally:
            self._key_users[key] -= 1
            if self._key_users[key] == 0:  # bound the maps: drop idle keys
                del self._key_users[key]
                self._key_slots.pop(key, None)
        now = self.clock()
        run.record_attempt(owner, outcome, now, retry_delay(run, spec, outcome, now, self.rng))
        self.observer.attempt(_outcome_label(outcome))
        self._queue.put_nowait(Completion.of(run, owner, extra))

    async def _perform(
        self, run: Run, spec: DeliverySpec, key_slot: asyncio.Semaphore
    ) -> tuple[AttemptOutcome, tuple[DomainEvent, ...]]:
        async with key_slot, self._slots:
            start = self.clock()
            if run.attempt_count == 0 and run.trigger is Trigger.SCHEDULE:
                self.observer.first_attempt_lag((start - run.scheduled_for).total_seconds())
            try:
                result = await self.performer.perform(run, spec, run.attempt_count + 1)
                outcome, extra = result.outcome, result.events
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
                extra = ()
        return outcome, tuple(extra)

    async def write_once(self) -> int:
        """Settle every completion queued now (one transaction). Returns how many."""
        batch: list[Completion] = []
        while not self._queue.empty() and len(batch) < self.settings.write_batch:
            item = self._queue.get_nowait()
            if item is not None:
                batch.append(item)
        if batch:
            await self._settle(batch)
        return len(batch)

    async def _settle(self, batch: list[Completion]) -> None:
        report = await settle_completions(self.uows, batch, self.clock())
        for c in batch:
            self._held.pop(c.run.id, None)
        if report.lost:
            log.warning("lease lost for %d runs; their results were dropped", len(report.lost))
        self.observer.settled(len(report.settled), len(report.lost))
        self._settled.set()
        self._wake.set()  # capacity freed

    async def drain(self) -> None:
        """Wait for every started attempt and write every result (tests, shutdown)."""
        while True:
            tasks = [
                h.task for h in self._held.values() if h.task is not None and not h.task.done()
            ]
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            await self.write_once()
            if not self._held and self._queue.empty():
                return
            if not tasks and self._queue.empty():
                return  # held runs whose task was cancelled and not released: nothing to wait

    async def extend_leases_once(self) -> int:
        leases = [(i, h.owner) for i, h in self._held.items()]
        if not leases:
            return 0
        until = self.clock() + timedelta(seconds=self.settings.lease_seconds)
        async with self.uows() as uow:
            n = await uow.runs.extend_run_leases(leases, until)
            await uow.commit()
        return n

    async def next_due_at(self) -> datetime | None:
        async with self.uows() as uow:
            return await uow.runs.next_run_due_at()

    # ---- the long-running loop ------------------------------------------------------------

    async def run(self) -> None:
        """Loop until `stop()` or cancellation (which writes nothing more: the leases of what
        was held expire and those runs are claimed again).

        Three servicekit `WorkerLoop`s: the claim loop (here), the writer and the lease
        extension (side tasks, ended by `stop()`)."""
        s = self.settings
        period = s.lease_seconds / 3
        self._claims = self._loop(
            "dispatcher", self._claim_step, idle_seconds=s.idle_poll_seconds, wake=self._wake
        )
        self._writer = self._loop("dispatcher writer", self._write_step, idle_seconds=0.0)
        leases = self._loop(
            "dispatcher leases", self._extend_step, idle_seconds=period, start_delay=period
        )
        self._side_loops = [self._writer, leases]
        self._side_tasks = [
            asyncio.create_task(self._writer.run(), name="dispatcher-writer"),
            asyncio.create_task(leases.run(), name="dispatcher-leases"),
        ]
        try:
            if not self._stopping:
                await self._claims.run()
        except asyncio.CancelledError:
            for t in self._side_tasks:  # no stop() will end them
                t.cancel()
            raise
        finally:
            self._stopping = True

    def _loop(
        self,
        name: str,
        step: Step,
        *,
        idle_seconds: float,
        start_delay: float = 0.0,
        wake: asyncio.Event | None = None,
    ) -> WorkerLoop:
        return WorkerLoop(
            name,
            step,
            idle_seconds=idle_seconds,
            start_delay_seconds=start_delay,
            backoff_initial_seconds=self.settings.db_retry_initial_seconds,
            backoff_max_seconds=self.settings.db_retry_max_seconds,
            outage="database unavailable",
            logger=log,
            wake=wake,
        )

    async def _claim_step(self) -> float | None:
        s = self.settings
        if s.held_limit - len(self._held) < s.refill_room:
            return s.idle_poll_seconds  # a settle frees capacity and wakes the loop
        claimed, asked = await self.pump()
        if claimed and claimed == asked:
            return 0.0  # probably more due right now
        next_due = await self.next_due_at()
        wait = s.idle_poll_seconds
        if next_due is not None:
            wait = min(wait, max((next_due - self.clock()).total_seconds(), 0.0))
        if claimed == 0:
            # Due but locked by another replica's claim: do not spin while it commits.
            wait = max(wait, MIN_IDLE_SECONDS)
        return wait

    async def _write_step(self) -> float | None:
        """Settle what has accumulated, in one transaction. A transient failure raises (the loop
        backs off) and keeps the batch for the next step; any other drops it: those leases
        expire and the runs are redone (at-least-once) rather than wedging the writer forever.
        The queue's None (from `stop()`) ends the writer once everything before it is written."""
        pending = self._writing
        if not pending:
            if self._writer_closing:
                if self._writer is not None:
                    self._writer.stop()
                return None
            item = await self._queue.get()
            if item is None:
                self._writer_closing = True
                return 0.0
            pending.append(item)
        while not self._queue.empty() and len(pending) < self.settings.write_batch:
            item = self._queue.get_nowait()
            if item is None:
                self._writer_closing = True
            else:
                pending.append(item)
        try:
            await self._settle(pending)
        except Exception as exc:
            if is_transient(exc):
                raise
            log.exception("dispatcher writer: cannot settle %d runs", len(pending))
            for c in pending:
                self._held.pop(c.run.id, None)
        pending.clear()
        return 0.0

    async def _extend_step(self) -> float | None:
        await self.extend_leases_once()
        return None

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop claiming; finish in-flight attempts within the grace; release the rest."""
        self._stopping = True
        if self._claims is not None:
            self._claims.stop()
        self._wake.set()
        tasks = [h.task for h in self._held.values() if h.task is not None and not h.task.done()]
        if tasks:
            _done, not_done = await asyncio.wait(tasks, timeout=grace_seconds)
            for t in not_done:
                t.cancel()
            await asyncio.gather(*not_done, return_exceptions=True)
        now = self.clock()
        for held in list(self._held.values()):
            if held.task is not None and held.task.cancelled() and held.run.holds_lease(held.owner):
                held.run.release(held.owner, now)
                self._queue.put_nowait(Completion.of(held.run, held.owner))
        writer = next((t for t in self._side_tasks if t.get_name() == "dispatcher-writer"), None)
        if writer is None:
            await self.write_once()  # driven step by step (no run()): flush directly
        else:
            self._queue.put_nowait(None)  # the writer flushes everything before it, then ends
            await asyncio.wait([writer], timeout=max(grace_seconds, 1.0))
        for loop in self._side_loops:
            loop.stop()
        for t in self._side_tasks:
            t.cancel()
        await asyncio.gather(*self._side_tasks, return_exceptions=True)
        self._side_tasks = []


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
    return (run.next_attempt_at or run.scheduled_for, run.id)


def _outcome_label(outcome: AttemptOutcome) -> str:
    if outcome.ok:
        return "succeeded"
    return outcome.error_kind or "error"
