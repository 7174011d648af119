"""The dispatcher: claim due deliveries, send them through webhookdeliver, record each attempt,
schedule the retry or dead-letter the delivery, and keep each endpoint's health streak."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Protocol

from prometheus_client import Counter, Histogram

from notification.domain.deliveries import (
    DeliveryStatus,
    EndpointHealth,
    EndpointHealthPolicy,
    record_attempt,
)
from notification.service_layer.ports import (
    AttemptRecord,
    ClaimedDelivery,
    Clock,
    DeliveryOutcome,
    HealthUpdate,
    NotificationStore,
    SubscriptionRecord,
)
from notification.service_layer.subscriptions import SubscriptionService
from webhookdeliver import BackoffPolicy, Delivery, DeliveryResult

log = logging.getLogger(__name__)

ATTEMPTS = Counter("notification_delivery_attempts_total", "Fan-out delivery attempts", ["outcome"])
ATTEMPT_SECONDS = Histogram(
    "notification_delivery_attempt_seconds", "Duration of one fan-out delivery attempt"
)
ENDPOINTS_DISABLED = Counter(
    "notification_endpoints_disabled_total", "Subscriptions disabled by the health rule"
)

# Attempt columns are bounded so one chatty endpoint cannot bloat the log.
MAX_ERROR_CHARS = 500
MAX_EXCERPT_CHARS = 1024


class DeliveryClient(Protocol):
    async def deliver(self, delivery: Delivery) -> DeliveryResult: ...


EndpointDisabled = Callable[[SubscriptionRecord], Awaitable[None]]


class Dispatcher:
    def __init__(
        self,
        store: NotificationStore,
        client: DeliveryClient,
        subscriptions: SubscriptionService,
        backoff: BackoffPolicy,
        health_policy: EndpointHealthPolicy,
        clock: Clock,
        *,
        on_endpoint_disabled: EndpointDisabled,
        batch_size: int = 100,
        concurrency: int = 16,
        lease_seconds: float = 60.0,
        timeout_seconds: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.subscriptions = subscriptions
        self.backoff = backoff
        self.health_policy = health_policy
        self.clock = clock
        self.on_endpoint_disabled = on_endpoint_disabled
        self.batch_size = batch_size
        self.lease_seconds = lease_seconds
        self.timeout_seconds = timeout_seconds
        self.rng = rng or random.Random()
        self._limit = asyncio.Semaphore(concurrency)

    async def run_once(self) -> int:
        """One batch: returns how many deliveries were attempted (0 = nothing due)."""
        now = self.clock()
        claimed = await self.store.claim_due_deliveries(now, self.batch_size, self.lease_seconds)
        if not claimed:
            return 0
        results = await asyncio.gather(*(self._send(c) for c in claimed))
        outcomes = [self._outcome(c, r) for c, r in zip(claimed, results, strict=True)]
        for outcome, result in zip(outcomes, results, strict=True):
            ATTEMPTS.labels(outcome.status).inc()
            ATTEMPT_SECONDS.observe(result.duration_ms / 1000)
        health, disabled = self._health(claimed, results)
        await self.store.complete_deliveries(outcomes, health, self.clock())
        for sub in disabled:
            ENDPOINTS_DISABLED.inc()
            log.warning("endpoint disabled after continuous failure", extra={"sub": sub.id})
            await self.on_endpoint_disabled(sub)
        return len(claimed)

    async def _send(self, claimed: ClaimedDelivery) -> DeliveryResult:
        secrets = self.subscriptions.signing_secrets(claimed.subscription, self.clock())
        delivery = Delivery(
            url=claimed.subscription.url,
            body=claimed.body,
            secrets=secrets,
            webhook_id=claimed.id,
            event_type=claimed.event_type,
            attempt=claimed.attempt_count + 1,
            timeout_seconds=self.timeout_seconds,
        )
        async with self._limit:
            return await self.client.deliver(delivery)

    def _outcome(self, claimed: ClaimedDelivery, result: DeliveryResult) -> DeliveryOutcome:
        round_started = claimed.round_started_at or result.started_at
        attempt = AttemptRecord(
            number=claimed.attempt_count + 1,
            started_at=result.started_at,
            duration_ms=round(result.duration_ms),
            status_code=result.status_code,
            error_kind=str(result.error_kind) if result.error_kind else None,
            error_message=(result.error_message or "")[:MAX_ERROR_CHARS] or None,
            response_excerpt=(result.response_excerpt or "")[:MAX_EXCERPT_CHARS] or None,
        )
        if result.ok:
            return DeliveryOutcome(
                claimed.id, attempt, DeliveryStatus.SUCCEEDED, None, round_started, None
            )
        error = f"{result.error_kind}: {result.error_message}"[:MAX_ERROR_CHARS]
        delay = None
        if result.retryable:
            now = self.clock()
            delay = self.backoff.next_delay(
                claimed.round_attempts + 1,
                (now - round_started).total_seconds(),
                retry_after=result.retry_after_seconds,
                rng=self.rng,
            )
        if delay is None:
            return DeliveryOutcome(
                claimed.id, attempt, DeliveryStatus.DEAD, None, round_started, error
            )
        next_at = self.clock() + timedelta(seconds=delay)
        return DeliveryOutcome(
            claimed.id, attempt, DeliveryStatus.RETRYING, next_at, round_started, error
        )

    def _health(
        self, claimed: Sequence[ClaimedDelivery], results: Sequence[DeliveryResult]
    ) -> tuple[list[HealthUpdate], list[SubscriptionRecord]]:
        # Streaks are computed from the claim-time snapshot, attempts in start order. Two
        # dispatchers racing on one endpoint may each miss the other's attempts; the rule is a
        # multi-day threshold, so that imprecision cannot flip its outcome in practice.
        streaks: dict[str, EndpointHealth] = {}
        subs: dict[str, SubscriptionRecord] = {}
        ordered = sorted(zip(claimed, results, strict=True), key=lambda cr: cr[1].started_at)
        for c, r in ordered:
            sub = c.subscription
            subs[sub.id] = sub
            current = streaks.get(
                sub.id, EndpointHealth(sub.failing_since, sub.consecutive_failures)
            )
            streaks[sub.id] = record_attempt(current, r.ok, r.started_at)
        now = self.clock()
        updates, disabled = [], []
        for sub_id, h in streaks.items():
            disable = self.health_policy.should_disable(
                h.failing_since, h.consecutive_failures, now
            )
            updates.append(HealthUpdate(sub_id, h.failing_since, h.consecutive_failures, disable))
            if disable:
                disabled.append(subs[sub_id])
        return updates, disabled
