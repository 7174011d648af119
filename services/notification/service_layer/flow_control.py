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
- Not here: the token reservations and slot wake-ups of the scheduler's gate (a deferred
  delivery comes back at its instant and takes a fresh token; fan-out is less bursty per
  destination than a schedule's runs).
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

    async def admit_claimed(
        self, claimed: Sequence[ClaimedDelivery], tx: ClaimFlow, owner: str, now: datetime
    ) -> list[ClaimedDelivery]:
        """The claimed deliveries that may be attempted now, in claim order; the others are
        deferred in the claim's transaction (module docstring)."""
        groups: dict[Key, list[ClaimedDelivery]] = {}
        taken_over: dict[Key, int] = {}
        for c in claimed:
            key = key_of(c)
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
        records, counts = await tx.lock_for_claim(keys, owner, now)
        deferrals: list[Deferral] = []
        states: dict[Key, FlowState] = {}
        for key in keys:
            group = groups[key]
            policy, state = self._policy_state(key, records.get(key))
            in_flight = counts.get(key, 0) + taken_over.get(key, 0)
            a = admit(policy, state, now, in_flight=in_flight, wanted=len(group))
            for c, due in zip(group[a.granted :], a.due_again, strict=True):
                deferrals.append(Deferral(c.id, owner, due))
            if (a.state.tokens, a.state.tokens_at) != (state.tokens, state.tokens_at):
                states[key] = a.state
        if not deferrals:
            return list(claimed)
        await tx.save_states(states, now)
        await tx.defer(deferrals)
        self.deferred += len(deferrals)
        later = {d.delivery_id for d in deferrals}
        return [c for c in claimed if c.id not in later]

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
    ) -> None:
        """Update the destinations' states from a batch's answers (module docstring)."""
        by_key: dict[Key, list[FlowAnswer]] = {}
        for key, answer in answers:
            by_key.setdefault(key, []).append(answer)
        signals: dict[Key, tuple[Signal, list[FlowAnswer]]] = {}
        for key, group in by_key.items():
            signal = answers_signal(group)
            if signal is None or (signal is Signal.FINE and not self._recovery_due(key, now)):
                continue
            signals[key] = (signal, group)
        if not signals:
            return

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

    def _recovery_due(self, key: Key, now: datetime) -> bool:
        last = self._adaptive.get(key)
        return last is not None and (now - last).total_seconds() >= RECOVERY_WRITE_SECONDS
