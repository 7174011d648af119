"""Flow control of the fan-out deliveries (DESIGN.md §7b "Flow control", issue 30 item 5): a
tenant's deliveries to one destination (`host:port`) obey the policy the tenant set through
the scheduler's `/v1/destinations` API (or the defaults), and a 429/503 with Retry-After holds
the destination for every one of them. The rules are `servicekit.flow`'s, the scheduler's.

- The policy reaches notification as events (`destination-events`, domain/destinations.py):
  the scheduler publishes them from its outbox; the destinations consumer applies them to
  notification's own copy (`destinations`, its database). The scheduler's holds arrive the same
  way (`destination.held`), so a destination that told the scheduler to wait is not hammered by
  notification meanwhile.
- Replica-safe: no limit is per process. A claim leases its deliveries as before, then, in the
  SAME transaction, `DeliveryFlowGate.admit_claimed` groups them by (tenant, destination),
  serialises with the other claims of those destinations (PostgreSQL: an advisory lock per
  destination, in key order), reads their records (locked) and counts the attempts in flight
  there: the deliveries leased to other claims, every replica's (a lease that expired is no
  longer in flight). `servicekit.flow.admit` says how many may start; the others are handed
  back in that transaction, due again at the hold's end, their token's instant or after a short
  slot wait, with NO attempt counted and their retry round untouched.
- Answers come back after each completion write (`react`, its own transaction): the worst
  signal per destination (servicekit.flow.answers_signal) updates its state. Fine answers write
  only for destinations whose adaptive rate a claim here has seen, at most once a second.
- Cost without limits: per claim, the lock and one read (constant SQL on PostgreSQL), nothing
  written; nothing at all after the completions.
- A claim that took an expired lease over (its lost attempt counted) is not gated: the
  dispatcher judges it at once (dead at the take-over when that was the round's last attempt),
  and it takes the slot its lost attempt held.
- A delivery deferred for a slot comes back after a short spread wait, or as soon as this
  worker's completion write frees a slot there (`freed`: made due at once, in one UPDATE); the
  claim loop looks again at the earliest instant a deferred one is due (`next_due_at`), not
  only after its idle poll.
- Not here: the scheduler's token reservations (a delivery deferred for a token comes back at
  its token's instant and takes a fresh one: a token may be wasted, the rate never exceeded).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from notification.service_layer.flow_ports import (
    ClaimFlow,
    Deferral,
    DestinationRecord,
    DestinationStore,
    Key,
)
from notification.service_layer.ports import ClaimedDelivery
from servicekit.flow import (
    DEFAULT_POLICY,
    NO_STATE,
    DestinationPolicy,
    FlowAnswer,
    FlowState,
    Signal,
    admit,
    answers_signal,
    react_to_answers,
)
from webhookdeliver import endpoint_key

log = logging.getLogger("notification.flow")
RECOVERY_WRITE_SECONDS = 1.0
"""Fine answers write an adaptive destination's recovery at most this often per worker."""
MAX_KNOWN_ADAPTIVE = 10_000
MAX_SLOT_WAITERS = 10_000
"""Deliveries deferred for a slot that this worker remembers (to make them due when one frees)."""
MAX_ADMITTED = 100_000
"""Deliveries admitted and not yet written that this worker remembers (far more than it holds)."""
NEVER = datetime.min.replace(tzinfo=UTC)


def key_of(claimed: ClaimedDelivery) -> Key:
    return claimed.tenant_id, endpoint_key(claimed.subscription.url)


@dataclass
class DeliveryFlowGate:
    default_policy: DestinationPolicy = DEFAULT_POLICY
    deferred: int = 0
    """Deliveries handed back by the gate (since start)."""
    _adaptive: dict[Key, datetime] = field(default_factory=dict)
    """Destinations with an adaptive rate, as the claims read them -> last recovery write."""
    _admitted: dict[str, Key] = field(default_factory=dict)
    """Deliveries this worker's claims let start, not yet written -> their destination."""
    _waiters: dict[Key, dict[str, None]] = field(default_factory=dict)
    """Deliveries this worker deferred for a slot, per destination, in turn order."""
    _soonest: datetime | None = None
    """The earliest instant a delivery this worker deferred is due again."""

    async def admit_claimed(
        self, claimed: Sequence[ClaimedDelivery], tx: ClaimFlow, owner: str, now: datetime
    ) -> list[ClaimedDelivery]:
        """The claimed deliveries that may be attempted now, in claim order; the others are
        deferred in the claim's transaction (module docstring)."""
        groups: dict[Key, list[ClaimedDelivery]] = {}
        taken_over: dict[Key, int] = {}
        if len(self._admitted) >= MAX_ADMITTED:  # attempts that raised are never written
            self._admitted.clear()
        for c in claimed:
            key = key_of(c)
            self._admitted[c.id] = key
            if c.lost_attempt:
                # Not gated: the claim counted its lost attempt, and the dispatcher must judge
                # it now (a delivery whose lost attempt was its round's last ends dead without
                # a POST; handed back, it would be attempted once more). It takes the slot its
                # lost attempt held.
                taken_over[key] = taken_over.get(key, 0) + 1
                groups.setdefault(key, [])
            else:
                groups.setdefault(key, []).append(c)
        if not groups:
            return []
        keys = sorted(groups)
        if self.default_policy.per_second is None:
            # A destination without a record (no policy, no state) is held by each worker's
            # own per-endpoint slots (NOTIFICATION_DISPATCH_PER_ENDPOINT_LIMIT): no lock, no
            # count, nothing leased only to be handed back (the scheduler's gate says why).
            keys = sorted(await tx.with_rows(keys))
            if not keys:
                return list(claimed)
        records, counts = await tx.lock_for_claim(keys, owner, now)
        deferrals: list[Deferral] = []
        states: dict[Key, FlowState] = {}
        room = MAX_SLOT_WAITERS - sum(len(w) for w in self._waiters.values())
        for key in keys:
            group = groups[key]
            policy, state = self._policy_state(key, records.get(key))
            in_flight = counts.get(key, 0) + taken_over.get(key, 0)
            a = admit(policy, state, now, in_flight=in_flight, wanted=len(group))
            rest = zip(group[a.granted :], a.due_again, a.for_slot, strict=True)
            for c, due, for_slot in rest:
                deferrals.append(Deferral(c.id, owner, due))
                self._admitted.pop(c.id, None)
                if for_slot and room > 0:
                    waiting = self._waiters.setdefault(key, {})
                    if c.id not in waiting:
                        waiting[c.id] = None
                        room -= 1
                elif not for_slot and key in self._waiters:
                    self._waiters[key].pop(c.id, None)
            admitted_waiters = self._waiters.get(key)
            if admitted_waiters:
                for c in group[: a.granted]:
                    admitted_waiters.pop(c.id, None)
            if (a.state.tokens, a.state.tokens_at) != (state.tokens, state.tokens_at):
                states[key] = a.state
        if not deferrals:
            return list(claimed)
        await tx.save_states(states, now)
        await tx.defer(deferrals)
        self.deferred += len(deferrals)
        soonest = min(d.due_at for d in deferrals)
        if self._soonest is None or self._soonest <= now or soonest < self._soonest:
            self._soonest = soonest
        later = {d.delivery_id for d in deferrals}
        return [c for c in claimed if c.id not in later]

    def next_due_at(self, now: datetime) -> datetime | None:
        """When a delivery this worker deferred is due again (its claim loop looks then,
        rather than after its idle poll), None when none is ahead."""
        if self._soonest is not None and self._soonest <= now:
            self._soonest = None
        return self._soonest

    def freed(self, written: Sequence[str]) -> list[str]:
        """The written deliveries free their destinations' slots: as many of the deliveries
        this worker deferred there for a slot are to be due now (not at their spread wait), so
        a destination is not left idle while they wait. Other workers' slots free theirs."""
        slots: dict[Key, int] = {}
        for delivery_id in written:
            key = self._admitted.pop(delivery_id, None)
            if key is not None and key in self._waiters:
                slots[key] = slots.get(key, 0) + 1
        due: list[str] = []
        for key, n in slots.items():
            waiting = self._waiters[key]
            while waiting and n > 0:
                delivery_id = next(iter(waiting))
                del waiting[delivery_id]
                due.append(delivery_id)
                n -= 1
            if not waiting:
                del self._waiters[key]
        return due

    def forget(self, delivery_ids: Sequence[str]) -> None:
        """Deliveries whose lease this worker lost or gave back: no slot of theirs to free."""
        for delivery_id in delivery_ids:
            self._admitted.pop(delivery_id, None)

    def _policy_state(
        self, key: Key, rec: DestinationRecord | None
    ) -> tuple[DestinationPolicy, FlowState]:
        if rec is None:
            self._adaptive.pop(key, None)
            return self.default_policy, NO_STATE
        if rec.state.current_rate is None:
            self._adaptive.pop(key, None)
        elif key not in self._adaptive and len(self._adaptive) < MAX_KNOWN_ADAPTIVE:
            self._adaptive[key] = NEVER  # its first fine answers write
        return rec.policy or self.default_policy, rec.state

    async def react(
        self,
        store: DestinationStore,
        answers: Sequence[tuple[Key, FlowAnswer]],
        now: datetime,
    ) -> dict[Key, datetime]:
        """Update the destinations' states from a batch's answers (module docstring); the
        holds they began or lengthened, by destination."""
        by_key: dict[Key, list[FlowAnswer]] = {}
        for key, answer in answers:
            by_key.setdefault(key, []).append(answer)
        signals: dict[Key, tuple[Signal, list[FlowAnswer]]] = {}
        for key, group in by_key.items():
            signal = answers_signal(group)
            if signal is None or (signal is Signal.FINE and not self._recovery_due(key, now)):
                continue
            signals[key] = (signal, group)
        held: dict[Key, datetime] = {}
        if not signals:
            return held

        def change(records: Mapping[Key, DestinationRecord]) -> dict[Key, FlowState]:
            states: dict[Key, FlowState] = {}
            for key, (signal, group) in signals.items():
                rec = records.get(key)
                if rec is None and signal is Signal.FINE:
                    continue  # nothing to recover
                policy = self.default_policy if rec is None else rec.policy or self.default_policy
                before = NO_STATE if rec is None else rec.state
                after = react_to_answers(before, policy, signal, group, now)
                if after != before:
                    states[key] = after
                if after.held_until is not None and after.held_until != before.held_until:
                    held[key] = after.held_until
                    log.info(
                        "destination %s of tenant %s held until %s",
                        key[1],
                        key[0],
                        after.held_until.isoformat(),
                    )
                if after.current_rate is not None:
                    self._adaptive[key] = now
            return states

        await store.update_states(sorted(signals), change, now)
        return held

    def _recovery_due(self, key: Key, now: datetime) -> bool:
        last = self._adaptive.get(key)
        return last is not None and (now - last).total_seconds() >= RECOVERY_WRITE_SECONDS
