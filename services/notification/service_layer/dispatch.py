"""The delivery dispatcher: lease due deliveries, send them through webhookdeliver, write each
attempt with the retry or dead letter it leads to, and keep each endpoint's health streak.

The same discipline as the scheduler's run dispatcher, a continuous pipeline:

    claim loop --(one task per delivery)--> attempts --(completion queue)--> writer
        ^                                                                      |
        +------------------------ capacity freed ------------------------------+

- The claim loop leases up to `claim_batch` due deliveries under a fresh owner token whenever
  at least `refill_room` fewer than `held_limit` are held, and otherwise waits (`idle_seconds`,
  or until a write frees capacity).
- Each attempt waits for its endpoint's slot (host:port: `per_endpoint_limit` at once) and then
  a global one (`concurrency`), so a hanging endpoint holds its own slots, not the others'.
- The writer writes whatever completions have accumulated in one transaction, as a
  compare-and-set on the lease: a completion whose delivery is no longer leased to its owner
  (the lease expired and another claim took it, or a replay reset it) is dropped and counted;
  the new holder's attempt stands. Delivery is at-least-once, with a stable X-Webhook-Id.
- A side loop extends the leases of every held delivery every `lease_seconds / 3`, so a slow
  attempt keeps its delivery, and one whose dispatcher died is due again within `lease_seconds`.
- `stop(grace)`: stop claiming, let attempts in flight finish for up to `grace` seconds, release
  the rest (due again at once, no attempt counted) and write what finished.

Loops run on `servicekit.worker.WorkerLoop` (idle waits, wake-ups, backoff on outages).
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol
from urllib.parse import urlsplit

from prometheus_client import Counter, Histogram

from notification.domain.deliveries import DeliveryStatus, EndpointHealthPolicy
from notification.service_layer.ports import (
    ClaimedDelivery,
    Clock,
    DeliveryCompletion,
    DeliveryStore,
    SubscriptionRecord,
)
from notification.service_layer.subscriptions import SubscriptionService
from servicekit.errors import is_transient
from servicekit.worker import WorkerLoop, busy_or_idle
from webhookdeliver import (
    AttemptRecord,
    BackoffPolicy,
    Delivery,
    DeliveryResult,
    bound_error_message,
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


class DeliveryClient(Protocol):
    async def deliver(self, delivery: Delivery) -> DeliveryResult: ...


EndpointDisabled = Callable[[SubscriptionRecord], Awaitable[None]]


@dataclass(frozen=True)
class DispatchSettings:
    concurrency: int = 16
    """Attempts in flight at once (all endpoints)."""
    per_endpoint_limit: int = 10
    """Attempts in flight at once to one endpoint (host:port)."""
    claim_batch: int = 100
    max_claimed: int = 0
    """Deliveries held (leased, not yet written) at most; 0 means 2 x concurrency."""
    lease_seconds: float = 60.0
    timeout_seconds: float = 10.0
    idle_seconds: float = 0.5
    write_batch: int = 500

    @property
    def held_limit(self) -> int:
        return self.max_claimed or 2 * self.concurrency

    @property
    def refill_room(self) -> int:
        """Claim again only once this many can be taken: half the deliveries held beyond the
        attempt slots (at least 1, at most half a claim batch), so claims stay large while the
        deliveries still held keep every slot busy."""
        spare = self.held_limit - self.concurrency
        return max(1, min(self.claim_batch, spare) // 2)


@dataclass
class _Held:
    delivery: ClaimedDelivery
    owner: str
    task: asyncio.Task[None] | None = None


def endpoint_key(url: str) -> str:
    """host:port of a target URL: the unit of per-endpoint concurrency."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port or (443 if parts.scheme == 'https' else 80)}"


class DeliveryDispatcher:
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
        self.written = 0
        """Completions written (attempts recorded)."""
        self.dropped = 0
        """Completions not written because their lease had been taken over."""
        self._held: dict[str, _Held] = {}
        self._queue: list[DeliveryCompletion] = []
        self._slots = asyncio.Semaphore(self.settings.concurrency)
        self._endpoint_slots: dict[str, asyncio.Semaphore] = {}
        self._endpoint_users: dict[str, int] = {}
        self._starved = False
        s = self.settings
        self._claims = WorkerLoop("delivery-claims", self._claim_step, idle_seconds=s.idle_seconds)
        self._writer = WorkerLoop(
            "delivery-writer", busy_or_idle(self.write_once), idle_seconds=s.idle_seconds
        )
        self._leases = WorkerLoop(
            "delivery-leases", self._lease_step, idle_seconds=s.lease_seconds / 3
        )
        self._loops: list[asyncio.Task[None]] = []

    @property
    def held(self) -> int:
        return len(self._held)

    # ---- steps (tests drive these with a manual clock) -------------------------------------

    async def pump(self) -> tuple[int, int]:
        """Claim once and start the attempts. Returns (claimed, asked)."""
        room = self.settings.held_limit - len(self._held)
        if room <= 0 or self._claims.stopping:
            return 0, 0
        asked = min(room, self.settings.claim_batch)
        now = self.clock()
        owner = f"{self.worker_id}:{uuid.uuid4().hex}"
        until = now + timedelta(seconds=self.settings.lease_seconds)
        claimed = await self.store.acquire_due_deliveries(owner, now, until, asked)
        secrets: dict[str, list[str]] = {}  # one decryption per subscription per claim
        for c in claimed:
            sub = c.subscription
            if sub.id not in secrets:
                secrets[sub.id] = self.subscriptions.signing_secrets(sub, now)
            held = _Held(c, owner)
            self._held[c.id] = held
            held.task = asyncio.create_task(self._attempt(c, owner, secrets[sub.id]))
        return len(claimed), asked

    async def drain(self) -> None:
        """Wait for every attempt started and write every result."""
        while True:
            tasks = [h.task for h in self._held.values() if h.task and not h.task.done()]
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            await self.write_once()
            if not tasks and not self._queue:
                return

    async def write_once(self) -> int:
        """Write the completions queued now (one transaction). Returns how many."""
        batch = self._queue[: self.settings.write_batch]
        if not batch:
            return 0
        now = self.clock()
        try:
            report = await self.store.complete_deliveries(batch, now)
        except Exception as exc:
            if is_transient(exc):
                raise  # kept queued; the writer loop backs off and retries
            # Not an outage: drop them rather than wedge the writer; their leases expire and
            # the deliveries are attempted again (at-least-once).
            log.exception("cannot write %d delivery completions; dropped", len(batch))
            self._forget(batch)
            return len(batch)
        self._forget(batch)
        self.written += len(report.written)
        lost = len(batch) - len(report.written)
        if lost:
            self.dropped += lost
            COMPLETIONS_DROPPED.inc(lost)
            log.warning("lease lost for %d deliveries; their results were dropped", lost)
        failing = [
            sub_id
            for sub_id, h in report.failing.items()
            if self.health_policy.should_disable(h.failing_since, h.consecutive_failures, now)
        ]
        if failing:
            for sub in await self.store.disable_subscriptions(failing, DISABLED_REASON, now):
                ENDPOINTS_DISABLED.inc()
                log.warning("endpoint disabled after continuous failure", extra={"sub": sub.id})
                await self.on_endpoint_disabled(sub)
        return len(batch)

    def _forget(self, batch: Sequence[DeliveryCompletion]) -> None:
        del self._queue[: len(batch)]
        for c in batch:
            held = self._held.get(c.delivery_id)
            if held is not None and held.owner == c.owner:
                del self._held[c.delivery_id]
        if self._starved:
            self._starved = False
            self._claims.wake()  # capacity freed

    async def extend_leases_once(self) -> int:
        leases = [(i, h.owner) for i, h in self._held.items()]
        until = self.clock() + timedelta(seconds=self.settings.lease_seconds)
        return await self.store.extend_delivery_leases(leases, until)

    # ---- one attempt ------------------------------------------------------------------------

    def _endpoint_slot(self, key: str) -> asyncio.Semaphore:
        sem = self._endpoint_slots.get(key)
        if sem is None:
            sem = self._endpoint_slots[key] = asyncio.Semaphore(self.settings.per_endpoint_limit)
        return sem

    async def _attempt(self, claimed: ClaimedDelivery, owner: str, secrets: list[str]) -> None:
        key = endpoint_key(claimed.subscription.url)
        slot = self._endpoint_slot(key)
        self._endpoint_users[key] = self._endpoint_users.get(key, 0) + 1
        try:
            async with slot, self._slots:
                result = await self.client.deliver(
                    Delivery(
                        url=claimed.subscription.url,
                        body=claimed.body,
                        secrets=secrets,
                        webhook_id=claimed.id,
                        event_type=claimed.event_type,
                        attempt=claimed.attempt_count + 1,
                        timeout_seconds=self.settings.timeout_seconds,
                    )
                )
        except Exception:
            # A bug, not a delivery failure (those are results): let go of the delivery; its
            # lease is no longer extended, so it is attempted again once the lease expires.
            log.exception("delivery %s could not be attempted", claimed.id)
            held = self._held.get(claimed.id)
            if held is not None and held.owner == owner:
                del self._held[claimed.id]
            return
        finally:
            self._endpoint_users[key] -= 1
            if self._endpoint_users[key] == 0:  # bound the maps: drop idle endpoints
                del self._endpoint_users[key]
                self._endpoint_slots.pop(key, None)
        completion = self._completion(claimed, owner, result)
        ATTEMPTS.labels(completion.status).inc()
        ATTEMPT_SECONDS.observe(result.duration_ms / 1000)
        self._queue.append(completion)
        self._writer.wake()

    def _completion(
        self, claimed: ClaimedDelivery, owner: str, result: DeliveryResult
    ) -> DeliveryCompletion:
        round_started = claimed.round_started_at or result.started_at
        attempt = AttemptRecord.of(claimed.attempt_count + 1, result)

        def done(
            status: DeliveryStatus, next_at: datetime | None = None, error: str | None = None
        ) -> DeliveryCompletion:
            return DeliveryCompletion(
                delivery_id=claimed.id,
                subscription_id=claimed.subscription.id,
                owner=owner,
                attempt=attempt,
                ok=result.ok,
                status=status.value,
                next_attempt_at=next_at,
                round_started_at=round_started,
                last_error=error,
            )

        if result.ok:
            return done(DeliveryStatus.SUCCEEDED)
        error = bound_error_message(f"{result.error_kind}: {result.error_message}")
        delay = None
        now = self.clock()
        if result.retryable:
            delay = self.backoff.next_delay(
                claimed.round_attempts + 1,
                (now - round_started).total_seconds(),
                retry_after=result.retry_after_seconds,
                rng=self.rng,
            )
        if delay is None:
            return done(DeliveryStatus.DEAD, error=error)
        return done(DeliveryStatus.RETRYING, now + timedelta(seconds=delay), error)

    # ---- the long-running loops -------------------------------------------------------------

    async def _claim_step(self) -> float | None:
        if self.settings.held_limit - len(self._held) < self.settings.refill_room:
            self._starved = True
            return None  # a write wakes the loop when it frees capacity
        claimed, asked = await self.pump()
        return 0.0 if claimed and claimed == asked else None

    async def _lease_step(self) -> float | None:
        await self.extend_leases_once()
        return None

    async def run(self) -> None:
        """Run the claim loop, the writer and the lease extension until `stop()`."""
        self._loops = [
            asyncio.create_task(loop.run(), name=loop.name)
            for loop in (self._claims, self._writer, self._leases)
        ]
        try:
            await asyncio.gather(*self._loops)
        finally:
            for t in self._loops:
                t.cancel()

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop claiming; finish in-flight attempts within the grace; release the rest."""
        self._claims.stop()
        claims = next((t for t in self._loops if t.get_name() == self._claims.name), None)
        if claims is not None:
            await asyncio.wait([claims], timeout=grace_seconds)  # a claim under way lands
        tasks = [h.task for h in self._held.values() if h.task and not h.task.done()]
        if tasks:
            _done, late = await asyncio.wait(tasks, timeout=grace_seconds)
            for t in late:
                t.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        self._writer.stop()
        self._leases.stop()
        await asyncio.gather(*self._loops, return_exceptions=True)
        unfinished = {c.delivery_id for c in self._queue}
        released = [
            (i, h.owner)
            for i, h in self._held.items()
            if i not in unfinished and (h.task is None or h.task.cancelled())
        ]
        try:
            while await self.write_once():
                pass
            await self.store.release_deliveries(released, self.clock())
        except Exception as exc:
            # Their leases expire instead: the deliveries are attempted again after that.
            log.warning("delivery dispatcher: cannot write on stop (%s)", exc)
        for i, _owner in released:
            self._held.pop(i, None)
