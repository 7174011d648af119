"""The delivery dispatcher: lease due deliveries, send them through webhookdeliver, write each
attempt with the retry or dead letter it leads to, and keep each endpoint's health streak.

The mechanism is the one both services share, `servicekit.runtime.pipeline.LeasedPipeline` (a
continuous claim loop under owner-token leases, per-endpoint slots inside a global cap, a batched
compare-and-set writer, lease renewal while attempts run, graceful stop; read its docstring).
`DeliveryDispatcher` owns that pipeline and hands it what is notification's:

- the store, `DeliveryLeases`. Acquire: `DeliveryStore.acquire_due_deliveries`, each delivery's
  attempt keyed by its endpoint (`endpoint_key`: host:port), its subscription's signing secrets
  decrypted once (`SubscriptionService` remembers them per ciphertext, bounded). Write:
  `complete_deliveries` (a completion whose delivery is no longer leased to its owner, because
  the lease expired and another claim took it or a replay reset it, is dropped and counted; the
  new holder's attempt stands: at-least-once, a stable X-Webhook-Id), then the health rule: an
  endpoint failing continuously is disabled and its tenant alerted. Release at stop:
  `release_deliveries` (due again at once, no attempt counted).
- the attempt, `DeliveryDispatcher.attempt`: one signed POST (`DeliveryClient.deliver`), its
  result turned into the attempt record and the state it leads to (succeeded, retrying at the
  backoff's delay, or dead: `notification.domain.deliveries.delivery_outcome`). A claim that
  took an expired lease over has counted its lost attempt (`worker_lost`), so the POST carries
  the next `X-Attempt`; when the lost attempt was the round's last, the delivery ends dead
  without one (`lost_attempt_outcome`).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from prometheus_client import Counter, Histogram

from notification.domain.deliveries import (
    LOST_ATTEMPT_KIND,
    LOST_ATTEMPT_MESSAGE,
    EndpointHealth,
    EndpointHealthPolicy,
    delivery_outcome,
    lost_attempt_outcome,
)
from notification.service_layer.flow_control import DeliveryFlowGate, key_of
from notification.service_layer.flow_ports import DestinationStore, HoldAnnouncer
from notification.service_layer.ports import (
    ClaimedDelivery,
    Clock,
    DeliveryCompletion,
    DeliveryStore,
    SubscriptionRecord,
)
from notification.service_layer.subscriptions import SubscriptionService
from servicekit.flow import FlowAnswer
from servicekit.runtime.pipeline import (
    Lease,
    LeasedPipeline,
    PipelineSettings,
    Released,
    random_owner,
)
from webhookdeliver import (
    AttemptRecord,
    BackoffPolicy,
    Delivery,
    DeliveryResult,
    bound_error_message,
    endpoint_key,
)

log = logging.getLogger(__name__)

ATTEMPTS = Counter("notification_delivery_attempts_total", "Fan-out delivery attempts", ["outcome"])
ATTEMPT_SECONDS = Histogram(
    "notification_delivery_attempt_seconds", "Duration of one fan-out delivery attempt"
)
COMPLETIONS_DROPPED = Counter(
    "notification_delivery_completions_dropped_total",
    "Finished attempts not written because their lease had been taken over",
)
ENDPOINTS_DISABLED = Counter(
    "notification_endpoints_disabled_total", "Subscriptions disabled by the health rule"
)
DISABLED_REASON = "endpoint_failing"


@dataclass
class FlowControl:
    """Flow control per destination (flow_control.py): the claim's gate and its state store.
    One instance, shared by the dispatcher and its leases; `announce` is set at wiring."""

    gate: DeliveryFlowGate
    store: DestinationStore
    announce: HoldAnnouncer | None = None
    """Tells the scheduler of the holds notification's deliveries met (None: nobody)."""


class DeliveryClient(Protocol):
    async def deliver(self, delivery: Delivery) -> DeliveryResult: ...


EndpointDisabled = Callable[[SubscriptionRecord], Awaitable[None]]


@dataclass(frozen=True)
class DispatchSettings(PipelineSettings):
    """The pipeline's settings with notification's defaults, and the attempt timeout."""

    concurrency: int = 16
    lease_seconds: float = 60.0
    idle_poll_seconds: float = 0.5
    timeout_seconds: float = 10.0
    """Of one POST (connect to last byte)."""


Written = DeliveryCompletion | Released


def _count_dropped(written: int, dropped: int) -> None:
    if dropped:
        COMPLETIONS_DROPPED.inc(dropped)


_attempts_by_outcome: dict[str, Counter] = {}


def _count_attempt(outcome: str) -> None:
    # `labels()` locks and builds its key on each call; the children are few and permanent.
    child = _attempts_by_outcome.get(outcome)
    if child is None:
        child = _attempts_by_outcome[outcome] = ATTEMPTS.labels(outcome)
    child.inc()


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """A claimed delivery with its subscription's signing secrets (decrypted once per claim)."""

    claimed: ClaimedDelivery
    secrets: list[str]


DeliveryLease = Lease[DueDelivery, Written]


class DeliveryLeases:
    """The deliveries' `LeaseStore` (servicekit.runtime.pipeline): the claim, the write and its
    health rule, lease extension and release."""

    def __init__(
        self,
        store: DeliveryStore,
        subscriptions: SubscriptionService,
        health_policy: EndpointHealthPolicy,
        clock: Clock,
        *,
        on_endpoint_disabled: EndpointDisabled,
        flow: FlowControl | None = None,
    ) -> None:
        self.store = store
        self.subscriptions = subscriptions
        self.health_policy = health_policy
        self.clock = clock
        self.on_endpoint_disabled = on_endpoint_disabled
        self.flow = flow

    async def acquire(
        self, owner: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[DeliveryLease]:
        gate = None if self.flow is None else self.flow.gate
        claimed = await self.store.acquire_due_deliveries(owner, now, lease_until, limit, gate=gate)
        secrets: dict[str, list[str]] = {}  # one look-up per subscription per claim
        leases: list[DeliveryLease] = []
        for c in claimed:
            sub = c.subscription
            sub_secrets = secrets.get(sub.id)
            if sub_secrets is None:
                sub_secrets = secrets[sub.id] = self.subscriptions.signing_secrets(sub, now)
            leases.append(Lease.attempt(c.id, DueDelivery(c, sub_secrets), endpoint_key(sub.url)))
        return leases

    async def write(self, batch: Sequence[Written]) -> set[str]:
        """Write the releases, then the completions (compare-and-set on their leases), then the
        health rule. Returns the deliveries whose lease had been lost.

        The pipeline retries a batch whose write raised an outage, so nothing may raise once
        the completions are written: a release is repeatable (it matches the owner), a
        completion is not (its retry would find its own lease gone)."""
        now = self.clock()
        released = [(r.id, r.owner) for r in batch if isinstance(r, Released)]
        if released:
            await self.store.release_deliveries(released, now)
            if self.flow is not None:
                self.flow.gate.forget([i for i, _ in released])
        done = [c for c in batch if isinstance(c, DeliveryCompletion)]
        if not done:
            return set()
        report = await self.store.complete_deliveries(done, now)
        lost = {c.delivery_id for c in done} - report.written
        await self._settle_flow(done, report.written, lost, now)
        try:
            await self._apply_health_rule(report.failing, now)
        except Exception:
            # Judged again at the endpoint's next failed attempt (its streak is written).
            log.exception("endpoint health rule not applied")
        return lost

    async def _settle_flow(
        self,
        done: Sequence[DeliveryCompletion],
        written: set[str],
        lost: set[str],
        now: datetime,
    ) -> None:
        """Flow control after the completions (flow_control.py): the slots they free, the
        destinations' signals in their answers. Never raises: a lost wake-up leaves the waiting
        deliveries to their spread wait, a lost reaction costs one signal (the destination's
        next answer tells it again)."""
        if self.flow is None:
            return
        gate = self.flow.gate
        gate.forget(sorted(lost))
        try:
            due = gate.freed(sorted(written))
            if due:
                await self.flow.store.wake(due, now)
            answers = [
                (c.flow_key, c.flow)
                for c in done
                if c.flow is not None and c.flow_key is not None and c.delivery_id in written
            ]
            held = await gate.react(self.flow.store, answers, now) if answers else {}
        except Exception:
            log.exception("flow control not updated after a completion write")
            return
        for key, until in sorted(held.items()):
            if self.flow.announce is None:
                break
            try:
                await self.flow.announce.held(key, until, now)
            except Exception:
                # The scheduler's own deliveries there will meet the destination's answer.
                log.exception("a destination's hold not announced to the scheduler")

    async def _apply_health_rule(self, failing: dict[str, EndpointHealth], now: datetime) -> None:
        to_disable = [
            sub_id
            for sub_id, h in failing.items()
            if self.health_policy.should_disable(h.failing_since, h.consecutive_failures, now)
        ]
        if not to_disable:
            return
        for sub in await self.store.disable_subscriptions(to_disable, DISABLED_REASON, now):
            ENDPOINTS_DISABLED.inc()
            log.warning("endpoint disabled after continuous failure", extra={"sub": sub.id})
            await self.on_endpoint_disabled(sub)

    async def extend(self, leases: Sequence[tuple[str, str]], until: datetime) -> int:
        return await self.store.extend_delivery_leases(leases, until)

    def release(self, lease: DeliveryLease, owner: str, now: datetime) -> Written:
        return Released(lease.id, owner)

    async def next_due_at(self) -> datetime | None:
        # Not probed in the database (the claim loop polls every `idle_poll_seconds`); only
        # the deliveries this worker's gate deferred, so it looks again when they are due.
        return None if self.flow is None else self.flow.gate.next_due_at(self.clock())


class DeliveryDispatcher:
    """The deliveries' worker: owns the `LeasedPipeline` (`pipeline`: `run`, `stop`, and the
    step-by-step controls for tests), hands it its store, `DeliveryLeases` (`leases`), and
    `attempt`."""

    def __init__(
        self,
        store: DeliveryStore,
        client: DeliveryClient,
        subscriptions: SubscriptionService,
        backoff: BackoffPolicy,
        health_policy: EndpointHealthPolicy,
        clock: Clock,
        *,
        on_endpoint_disabled: EndpointDisabled,
        settings: DispatchSettings | None = None,
        worker_id: str | None = None,
        rng: random.Random | None = None,
        flow: FlowControl | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.subscriptions = subscriptions
        self.backoff = backoff
        self.health_policy = health_policy
        self.clock = clock
        self.on_endpoint_disabled = on_endpoint_disabled
        self.settings = settings or DispatchSettings()
        self.worker_id = worker_id or f"dsp_{uuid.uuid4().hex[:16]}"
        self.rng = rng or random.Random()
        self.flow = flow
        self.leases = DeliveryLeases(
            store,
            subscriptions,
            health_policy,
            clock,
            on_endpoint_disabled=on_endpoint_disabled,
            flow=flow,
        )
        self.pipeline: LeasedPipeline[DueDelivery, Written] = LeasedPipeline(
            self.leases,
            self.attempt,
            clock,
            settings=self.settings,
            new_owner=random_owner(self.worker_id),
            name="delivery dispatcher",
            outage="database unavailable",
            logger=log,
            on_written=_count_dropped,
        )

    async def attempt(self, due: DueDelivery, owner: str) -> Written:
        """One signed POST, and the state its result leads to; none when the claim took over a
        lost attempt that was the round's last (the delivery ends dead at the take-over)."""
        claimed = due.claimed
        if claimed.lost_attempt:
            ended = self._ended_at_take_over(claimed, owner)
            if ended is not None:
                return ended
        result = await self.client.deliver(
            Delivery(
                url=claimed.subscription.url,
                body=claimed.body,
                secrets=due.secrets,
                webhook_id=claimed.id,
                event_type=claimed.event_type,
                attempt=claimed.attempt_count + 1,
                timeout_seconds=self.settings.timeout_seconds,
            )
        )
        completion = self._completion(claimed, owner, result)
        _count_attempt(completion.status)
        ATTEMPT_SECONDS.observe(result.duration_ms / 1000)
        return completion

    def _completion(
        self, claimed: ClaimedDelivery, owner: str, result: DeliveryResult
    ) -> DeliveryCompletion:
        outcome = delivery_outcome(
            ok=result.ok,
            retryable=result.retryable,
            retry_after_seconds=result.retry_after_seconds,
            round_attempts=claimed.round_attempts,
            round_started_at=claimed.round_started_at,
            started_at=result.started_at,
            now=self.clock(),
            next_delay=self._next_delay,
        )
        error = None
        if not result.ok:
            error = bound_error_message(f"{result.error_kind}: {result.error_message}")
        return DeliveryCompletion(
            delivery_id=claimed.id,
            subscription_id=claimed.subscription.id,
            owner=owner,
            attempt=AttemptRecord.of(claimed.attempt_count + 1, result),
            ok=result.ok,
            status=outcome.status.value,
            next_attempt_at=outcome.next_attempt_at,
            round_started_at=outcome.round_started_at,
            last_error=error,
            flow=FlowAnswer(result.started_at, result.status_code, result.retry_after_seconds),
            flow_key=key_of(claimed),
        )

    def _ended_at_take_over(
        self, claimed: ClaimedDelivery, owner: str
    ) -> DeliveryCompletion | None:
        now = self.clock()
        outcome = lost_attempt_outcome(
            round_attempts=claimed.round_attempts,
            round_started_at=claimed.round_started_at or now,
            now=now,
            next_delay=self._next_delay,
        )
        if outcome is None:
            return None
        log.warning(
            "delivery dead at take-over: its lost attempt was its last",
            extra={"delivery": claimed.id, "attempts": claimed.attempt_count},
        )
        return DeliveryCompletion(
            delivery_id=claimed.id,
            subscription_id=claimed.subscription.id,
            owner=owner,
            attempt=None,
            ok=False,
            status=outcome.status.value,
            next_attempt_at=None,
            round_started_at=outcome.round_started_at,
            last_error=f"{LOST_ATTEMPT_KIND}: {LOST_ATTEMPT_MESSAGE}",
        )

    def _next_delay(self, attempt: int, elapsed: float, retry_after: float | None) -> float | None:
        return self.backoff.next_delay(attempt, elapsed, retry_after=retry_after, rng=self.rng)
