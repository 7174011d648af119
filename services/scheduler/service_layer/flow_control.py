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
- Answers come back through `FlowGate.react` after each settle (its own transaction, after the
  settle's commit: the settle is unchanged): the worst signal per destination in the batch
  (servicekit.flow.worst) updates its state. Fine answers write only for destinations whose
  adaptive rate this worker has seen (at most once a second each), so destinations without
  limits cost no write at all.
- Cost of the no-limits path: per claim, one advisory-lock statement and two reads (the rows
  and the in-flight count, index ranges of the claim's destinations), and one more index entry
  per claimed run. Why not filter in the claim's SQL: it would add a probe of `destinations`
  per candidate run to the tenant-fair walk, and a held destination's runs at the head of a
  tenant's range would be read on every claim.
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
from scheduler.service_layer.flow_ports import Deferral, DestinationRecord, Key
from scheduler.service_layer.run_ports import DeliverySpec
from scheduler.service_layer.unit_of_work import UnitOfWork, UnitOfWorkFactory
from servicekit.flow import (
    DEFAULT_POLICY,
    NO_STATE,
    DestinationPolicy,
    FlowState,
    Signal,
    admit,
    observed_rate,
    react,
    signal_of,
    worst,
)

log = logging.getLogger("scheduler.flow")
Claimed = ClaimedRun[DeliverySpec]
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

    def note(self, run_id: str, answer: Answer) -> None:
        self._answers[run_id] = answer

    def take(self, run_ids: Sequence[str]) -> list[Answer]:
        """The answers of these runs, forgotten here (their completions are being written)."""
        return [a for i in run_ids if (a := self._answers.pop(i, None)) is not None]

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
        records = await uow.destinations.lock_for_claim(keys)
        counts = await uow.destinations.in_flight(keys, excluding_owner=owner)
        deferred: set[str] = set()
        deferrals: list[Deferral] = []
        tokens: dict[Key, FlowState] = {}
        for key in keys:
            group, rec = groups[key], records.get(key)
            policy, state = self._policy_state(key, rec)
            a = admit(policy, state, now, in_flight=counts.get(key, 0), wanted=len(group))
            for c, due in zip(group[a.granted :], a.due_again, strict=True):
                deferred.add(c.run.id)
                deferrals.append(Deferral(c.run.id, owner, due))
            if a.state.tokens_at == now and a.state != state:
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
            found = [s for a in group if (s := signal_of(a.status_code, a.retry_after_seconds))]
            signal = worst(found)
            if signal is None:
                continue
            if signal is Signal.FINE and not self._recovery_due(key, now):
                continue
            signals[key] = (signal, group)
        if not signals:
            return
        held: dict[Key, datetime] = {}
        async with uows() as uow:
            records = await uow.destinations.lock_for_update(sorted(signals))
            states: dict[Key, FlowState] = {}
            for key, (signal, group) in sorted(signals.items()):
                rec = records.get(key)
                if rec is None and signal is Signal.FINE:
                    continue  # nothing to recover
                policy = self.default_policy if rec is None else rec.policy or self.default_policy
                before = NO_STATE if rec is None else rec.state
                after = react(
                    before,
                    policy,
                    signal,
                    now,
                    retry_after_seconds=_retry_after(group),
                    observed=observed_rate([a.started_at for a in group]),
                )
                if after != before:
                    states[key] = after
                if after.held_until is not None and after.held_until != before.held_until:
                    held[key] = after.held_until
                if after.current_rate is not None:
                    self._adaptive[key] = now
            await uow.destinations.save_states(states, now)
            await uow.commit()
        for key, until in sorted(held.items()):
            async with uows() as uow:
                moved = await uow.destinations.hold_pending(key, until)
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


def _retry_after(group: Sequence[Answer]) -> float | None:
    waits = [a.retry_after_seconds for a in group if a.retry_after_seconds is not None]
    return max(waits) if waits else None
