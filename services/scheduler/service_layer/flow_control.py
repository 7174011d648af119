"""Flow control in the dispatcher (DESIGN.md §7b "Flow control"; the rules are
`servicekit.flow`'s, shared with notification). Replica-safe: every limit is held in the
database, never per process, so N workers or replicas do not multiply it.

Design (chosen over a filter in the claim's SQL, see below):
- A claim leases its runs as before (tenant-fair, the pipeline's lanes), then, in the SAME
  transaction and before anything is attempted, `FlowGate.admit_claimed` takes the runs it
  decided to attempt, groups them by (tenant, destination), serialises with the other claims of
  those destinations (an advisory lock per destination on PostgreSQL, in key order), reads
  their policies and states (`destinations`, locked) and counts what is in flight there: the
  destination's leased runs of other claims, every worker's (`runs.destination`, copied from
  the schedule by the claim; `ix_runs_destination_leased`). `servicekit.flow.admit` says how
  many may start: a held destination none, otherwise up to `max_in_flight` with a token each
  from the effective rate's bucket (debited in the row: one UPDATE per rate-limited destination
  per claim). The others are handed back pending in that transaction, due again at the hold's
  end, at their token's instant or after a short spread wait for a slot, with NO attempt
  counted, `started_at` unset when no attempt went out (so `max_retry_duration_seconds` and
  the breaker never see a deferral), and `due_at`, their place in the tenant's order, kept.
- A hold (429/503 with Retry-After) also moves the destination's due runs to `held_until` at
  once (`hold_pending`, SKIP LOCKED), so claims stop taking them: the claim's own SQL needs no
  filter, and the tenant-fair walk pays nothing on the common path. A run planned during the
  hold, or locked by a claim meanwhile, meets the hold in the gate.
- A run deferred for a slot comes back after about the destination's attempt duration (this
  worker's average) per turn, at most 2 s; and when this worker's settle frees slots there,
  as many of the runs it deferred for a slot are due at once, in the settle's commit
  (`wake_waiters`): a destination is never idle while its runs wait on a spread timer.
- A run deferred for want of a token reserves the next one (the bucket in debt, <= 2 s of the
  rate, `servicekit.flow.admit(reserve=True)`) and is due at its instant; this worker
  remembers it and lets it start then with no second token (`prepaid`), so later claims
  queue behind it instead of colliding at the same instants (measured: 14,000 -> ~4,500
  deferrals for 600 runs at 20/s). A run another worker claims takes a token of its own: a
  token is wasted, the rate never exceeded. A hold gives the prepaid runs' tokens back; a cut
  or a hold restarts the bucket (empty; at a hold's end with one token), and this worker's
  reservations there are void: their runs are paced at the new rate, not sent at the old one.
- Answers come back through `FlowGate.react` after each settle (its own transaction, after the
  settle's commit: the settle is unchanged): the worst signal per destination in the batch
  (servicekit.flow.worst) updates its state. Fine answers write only for destinations whose
  adaptive rate this worker has seen (at most once a second each), so destinations without
  limits cost no write at all.
- A destination without a row (no policy set, no state: never a 429/503, no hold) costs one
  unlocked read per claim (which of its destinations have a row) and nothing else: its
  default in-flight limit (`SCHEDULER_DESTINATION_MAX_IN_FLIGHT`) is held by each worker's own
  per-key slots, as before flow control, so N worker processes may have N x the default in
  flight there. Counted in the database, the default made every claim of a busy destination
  lease runs only to hand them back (the pipeline holds up to 4 x its width: its claims met a
  full destination each time), which cost a third of the throughput of a burst. A policy, a
  hold or an adaptive rate creates the row, and from the next claim on the limit holds across
  every worker exactly. With a default rate (`SCHEDULER_DESTINATION_PER_SECOND`) every
  destination is gated.
- Cost of a gated destination: per claim, two statements on asyncpg directly, constant SQL
  prepared once per connection (the advisory locks; then the rows and the in-flight counts
  in one read, whose snapshot follows the locks). Why not filter in the claim's SQL: it
  would add a probe of `destinations` per candidate run to the tenant-fair walk, and a held
  destination's runs at the head of a tenant's range would be read on every claim.
- SQLite (one worker process, one writer): the same code; the writer lock serialises claims.
- A misfire policy still judges a run the hold kept past the misfire grace (fire_once runs the
  latest of what the hold kept back; fire_all runs each): the occurrences were missed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from scheduler.domain.claiming import ClaimedRun, Verdict
from scheduler.domain.destination_holds import DestinationHold
from scheduler.domain.events import DESTINATION_HELD, DomainEvent, destination_event
from scheduler.service_layer.flow_ports import Deferral, DestinationRecord, Key
from scheduler.service_layer.run_ports import DeliverySpec
from scheduler.service_layer.unit_of_work import UnitOfWork, UnitOfWorkFactory
from servicekit.data.ids import new_id
from servicekit.flow import (
    DEFAULT_POLICY,
    NO_STATE,
    DestinationPolicy,
    FlowAnswer,
    FlowState,
    Signal,
    admit,
    answers_signal,
    react,
    react_to_answers,
)

log = logging.getLogger("scheduler.flow")
Claimed = ClaimedRun[DeliverySpec]
MAX_SLOT_WAITERS = 10_000
"""Runs deferred for a slot that this worker remembers (to make them due when a slot frees)."""
MAX_RESERVED = 100_000
"""Tokens reserved for deferred runs that this worker remembers. A run another worker claims
takes a token of its own there (never more than the rate: at worst one token is wasted)."""
MAX_ADMITTED = 100_000
"""Runs admitted and not yet written that this worker remembers (far more than it holds)."""
DURATION_WEIGHT = 0.2
"""Weight of the newest attempt in a destination's average attempt duration."""
RECOVERY_WRITE_SECONDS = 1.0
"""Fine answers write an adaptive destination's recovery at most this often per worker."""
MAX_KNOWN_ADAPTIVE = 10_000


@dataclass(frozen=True)
class Answer:
    """What one attempt's answer tells flow control."""

    key: Key
    started_at: datetime
    status_code: int | None
    retry_after_seconds: float | None


@dataclass
class FlowGate:
    destination_of: Callable[[DeliverySpec], str | None]
    default_policy: DestinationPolicy = DEFAULT_POLICY
    deferred: int = 0
    """Runs handed back by the gate (since start)."""
    _adaptive: dict[Key, datetime] = field(default_factory=dict)
    """Destinations with an adaptive rate, as the claims read them -> last recovery write."""
    _answers: dict[str, Answer] = field(default_factory=dict)
    """Answers of attempts not yet written, by run id (as many as the pipeline holds)."""
    _admitted: dict[str, Key] = field(default_factory=dict)
    """Runs this worker's claims let start, not yet written -> their destination."""
    _waiters: dict[Key, dict[str, None]] = field(default_factory=dict)
    """Runs this worker deferred for a slot, per destination, in turn order."""
    _reserved: dict[str, tuple[Key, datetime]] = field(default_factory=dict)
    """Runs this worker deferred with a token reserved for them (taken from the bucket), and
    the instant it is theirs."""
    _durations: dict[Key, float] = field(default_factory=dict)
    """A destination's average attempt duration (seconds), as this worker saw it."""
    gated: set[Key] = field(default_factory=set)
    """The destinations the last claim's gate held to their limits through the database; the
    claim's other destinations are `local`: held to the default by this worker's slots."""

    def local(self, c: Claimed) -> bool:
        """Whether this attempt's destination is limited by this worker's own slots (the
        default in-flight limit per process) rather than by the gate."""
        key = self.key_of(c)
        return key is None or key not in self.gated

    def note(self, run_id: str, answer: Answer, duration_seconds: float) -> None:
        self._answers[run_id] = answer
        if answer.key in self._durations or len(self._durations) < MAX_KNOWN_ADAPTIVE:
            before = self._durations.get(answer.key, duration_seconds)
            w = DURATION_WEIGHT
            self._durations[answer.key] = (1 - w) * before + w * max(duration_seconds, 0.0)

    def take(self, run_ids: Sequence[str]) -> list[Answer]:
        """The answers of these runs, forgotten here (their completions are being written)."""
        return [a for i in run_ids if (a := self._answers.pop(i, None)) is not None]

    async def wake_waiters(self, uow: UnitOfWork, written: Sequence[str], now: datetime) -> int:
        """In the settle's transaction: for each slot the written runs free at a destination,
        one run this worker deferred there for a slot is due now (not at its spread wait), so
        a destination with runs waiting is not left idle. Other workers' slots free theirs."""
        freed: dict[Key, int] = {}
        for run_id in written:
            key = self._admitted.pop(run_id, None)
            if key is not None:
                freed[key] = freed.get(key, 0) + 1
        due: list[tuple[str, datetime]] = []
        for key, n in freed.items():
            waiting = self._waiters.get(key)
            while waiting and n > 0:
                run_id = next(iter(waiting))
                del waiting[run_id]
                # No sooner than the instant of the token reserved for it.
                due.append((run_id, max(self._reserved.get(run_id, (key, now))[1], now)))
                n -= 1
            if waiting is not None and not waiting:
                del self._waiters[key]
        return await uow.destinations.wake_runs(due) if due else 0

    def forget(self, run_ids: Sequence[str]) -> None:
        """Runs whose lease this worker lost: their slot is not its to free."""
        for run_id in run_ids:
            self._admitted.pop(run_id, None)

    def _remember(self, key: Key, granted: Sequence[Claimed], waiting: Sequence[str]) -> None:
        waiters = self._waiters.get(key)
        if len(self._admitted) >= MAX_ADMITTED:  # attempts that raised are never written
            self._admitted.clear()
        for c in granted:
            self._admitted[c.run.id] = key
            if waiters is not None:
                waiters.pop(c.run.id, None)
        if not waiting:
            return
        room = MAX_SLOT_WAITERS - sum(len(w) for w in self._waiters.values())
        if room >= len(waiting):
            self._waiters.setdefault(key, {}).update(dict.fromkeys(waiting))

    def key_of(self, c: Claimed) -> Key | None:
        if c.verdict is not Verdict.ATTEMPT or c.spec is None:
            return None
        dest = self.destination_of(c.spec)
        return None if dest is None else (c.run.tenant_id, dest)

    async def admit_claimed(
        self, uow: UnitOfWork, decided: Sequence[Claimed], owner: str, now: datetime
    ) -> list[Claimed]:
        """The decided runs that go on (every verdict but a deferred attempt); the deferred
        ones are pending again in `uow`'s transaction (see the module docstring)."""
        groups: dict[Key, list[Claimed]] = {}
        for c in decided:
            key = self.key_of(c)
            if key is not None:
                groups.setdefault(key, []).append(c)
        if not groups:
            return list(decided)
        keys = sorted(groups)
        if self.default_policy.per_second is None:
            # A destination without a row (no policy, no state) is held to the default
            # in-flight limit by each worker's own slots (`local`): no lock, no count.
            keys = sorted(await uow.destinations.with_rows(keys))
        self.gated = set(keys)
        if not keys:
            return list(decided)
        if len(self._reserved) >= MAX_RESERVED:  # runs deleted meanwhile never come back
            self._reserved.clear()
        records, counts = await uow.destinations.lock_for_claim(keys, owner)
        deferred: set[str] = set()
        deferrals: list[Deferral] = []
        tokens: dict[Key, FlowState] = {}
        for key in keys:
            group, rec = groups[key], records.get(key)
            policy, state = self._policy_state(key, rec)
            # A run holding a token this worker reserved for a later instant (woken early by
            # a slot's end) waits for it; those whose instant has come go first (prepaid).
            early = [c for c in group if self._reserved.get(c.run.id, (key, now))[1] > now]
            for c in early:
                deferrals.append(_deferral(c, owner, self._reserved[c.run.id][1], now))
                deferred.add(c.run.id)
            group = [c for c in group if c.run.id not in deferred]
            group.sort(key=lambda c: c.run.id not in self._reserved)
            prepaid = sum(1 for c in group if c.run.id in self._reserved)
            a = admit(
                policy,
                state,
                now,
                in_flight=counts.get(key, 0),
                wanted=len(group),
                prepaid=prepaid,
                reserve=True,
                slot_seconds=self._durations.get(key, 0.0),
            )
            waiting: list[str] = []
            later = zip(group[a.granted :], a.due_again, a.for_slot, a.reserved, strict=True)
            for c, due, for_slot, reserved in later:
                deferred.add(c.run.id)
                deferrals.append(_deferral(c, owner, due, now))
                if reserved is None:
                    self._reserved.pop(c.run.id, None)
                elif c.run.id not in self._reserved:  # a prepaid one keeps its instant
                    self._reserved[c.run.id] = (key, reserved)
                if for_slot:  # a slot's end makes it due, at its token's instant at the earliest
                    waiting.append(c.run.id)
            for c in group[: a.granted]:
                self._reserved.pop(c.run.id, None)
            self._remember(key, group[: a.granted], waiting)
            if (a.state.tokens, a.state.tokens_at) != (state.tokens, state.tokens_at):
                tokens[key] = a.state
        await uow.destinations.save_states(tokens, now)
        await uow.destinations.defer_runs(deferrals)
        self.deferred += len(deferrals)
        return [c for c in decided if c.run.id not in deferred]

    def _policy_state(
        self, key: Key, rec: DestinationRecord | None
    ) -> tuple[DestinationPolicy, FlowState]:
        if rec is None:
            self._adaptive.pop(key, None)
            return self.default_policy, NO_STATE
        if rec.state.current_rate is not None:
            if key not in self._adaptive and len(self._adaptive) < MAX_KNOWN_ADAPTIVE:
                self._adaptive[key] = datetime.min.replace(tzinfo=rec.updated_at.tzinfo)
        else:
            self._adaptive.pop(key, None)
        return rec.policy or self.default_policy, rec.state

    async def react(
        self, uows: UnitOfWorkFactory, answers: Sequence[Answer], now: datetime
    ) -> None:
        """Update the destinations' states from a batch of answers (module docstring)."""
        by_key: dict[Key, list[Answer]] = {}
        for a in answers:
            by_key.setdefault(a.key, []).append(a)
        signals: dict[Key, tuple[Signal, list[Answer]]] = {}
        for key, group in by_key.items():
            signal = answers_signal(_flow_answers(group))
            if signal is None:
                continue
            if signal is Signal.FINE and not self._recovery_due(key, now):
                continue
            signals[key] = (signal, group)
        if not signals:
            return
        held: dict[Key, datetime] = {}
        void: set[Key] = set()
        async with uows() as uow:
            records = await uow.destinations.lock_for_update(sorted(signals))
            states: dict[Key, FlowState] = {}
            for key, (signal, group) in sorted(signals.items()):
                rec = records.get(key)
                if rec is None and signal is Signal.FINE:
                    continue  # nothing to recover
                policy = self.default_policy if rec is None else rec.policy or self.default_policy
                before = NO_STATE if rec is None else rec.state
                after = react_to_answers(before, policy, signal, _flow_answers(group), now)
                if after != before:
                    states[key] = after
                if after.held_until is not None and after.held_until != before.held_until:
                    held[key] = after.held_until
                if after.cut_at != before.cut_at or key in held:
                    void.add(key)
                if after.current_rate is not None:
                    self._adaptive[key] = now
            await uow.destinations.save_states(states, now)
            await uow.commit()
        if void:  # a cut or a hold restarted the bucket: the tokens reserved here are void
            self._reserved = {r: v for r, v in self._reserved.items() if v[0] not in void}
        for key, until in sorted(held.items()):
            async with uows() as uow:
                moved = await uow.destinations.hold_pending(key, until, now)
                # Notification's deliveries to the destination are held too.
                uow.add_event(_held_event(key, until, now))
                await uow.commit()
            log.info(
                "destination %s of tenant %s held until %s (%d due runs moved)",
                key[1],
                key[0],
                until.isoformat(),
                moved,
            )

    def _recovery_due(self, key: Key, now: datetime) -> bool:
        last = self._adaptive.get(key)
        if last is None:
            return False
        return (now - last).total_seconds() >= RECOVERY_WRITE_SECONDS


def _deferral(c: Claimed, owner: str, due: datetime, now: datetime) -> Deferral:
    return Deferral(c.run.id, owner, due, max((due - now).total_seconds(), 0.0))


def _flow_answers(group: Sequence[Answer]) -> list[FlowAnswer]:
    return [FlowAnswer(a.started_at, a.status_code, a.retry_after_seconds) for a in group]


def _held_event(key: Key, until: datetime, now: datetime) -> DomainEvent:
    tenant_id, destination = key
    data = {"destination": destination, "held_until": until.isoformat()}
    return destination_event(new_id("evt", at=now), DESTINATION_HELD, tenant_id, now, data)


async def apply_hold(uow: UnitOfWork, hold: DestinationHold, now: datetime) -> bool:
    """A hold notification's deliveries met (domain/destination_holds.py), in `uow`'s
    transaction: the destination's state is held until then (never shortened, as `react`
    keeps it) and its due runs move there, as a hold the scheduler met itself does. Not
    published again: notification has it. Whether it changed anything."""
    key = (hold.tenant_id, hold.destination)
    wait = (hold.held_until - now).total_seconds()
    if wait <= 0:
        return False
    records = await uow.destinations.lock_for_update([key])
    rec = records.get(key)
    before = NO_STATE if rec is None else rec.state
    policy = DEFAULT_POLICY if rec is None or rec.policy is None else rec.policy
    after = react(before, policy, Signal.HOLD, now, retry_after_seconds=wait)
    if after.held_until == before.held_until or after.held_until is None:
        return False
    await uow.destinations.save_states({key: after}, now)
    moved = await uow.destinations.hold_pending(key, after.held_until, now)
    log.info(
        "destination %s of tenant %s held until %s by notification's answer (%d due runs moved)",
        hold.destination,
        hold.tenant_id,
        after.held_until.isoformat(),
        moved,
    )
    return True
