"""Action performers (service_layer/run_ports.ActionPerformer): what one attempt of a run does.

- `WebhookAction`: POST the run's payload to the schedule's target through `webhookdeliver`
  (SSRF guard, signing with every current secret, no redirects, bounded body and time). Every
  attempt carries X-Webhook-Id = the run id and X-Event-Type = schedule.triggered.
- `EventAction`: the `event` action writes `schedule.triggered` (data = payload) to the outbox in
  the run's own transaction and the run succeeds with it: the hand-off to the broker is durable
  at that point, and the outbox relay publishes at-least-once with acks=all (DESIGN §9). The
  events step may tighten "succeeded" to "acknowledged by the broker" behind this same seam.
- `ActionRouter` picks one by the schedule's action.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit

from scheduler.domain.events import DomainEvent
from scheduler.domain.ids import stable_id
from scheduler.domain.policies import Action
from scheduler.domain.run import AttemptOutcome, Run
from scheduler.service_layer.run_ports import ActionPerformer, ActionResult, DeliverySpec
from webhookdeliver import Deliverer, Delivery

EVENT_TYPE_TRIGGERED = "schedule.triggered"
Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def payload_bytes(run: Run) -> bytes:
    return json.dumps(run.payload, separators=(",", ":"), ensure_ascii=False).encode()


class WebhookAction:
    def __init__(self, deliverer: Deliverer, clock: Clock = _utc_now) -> None:
        self.deliverer = deliverer
        self.clock = clock

    def concurrency_key(self, spec: DeliverySpec) -> str:
        if spec.target is None:
            return f"schedule:{spec.schedule_id}"
        parts = urlsplit(spec.target.url)
        return f"{parts.scheme}://{(parts.hostname or '').lower()}:{parts.port or ''}"

    async def perform(self, run: Run, spec: DeliverySpec, attempt_number: int) -> ActionResult:
        if spec.target is None:
            return ActionResult(
                AttemptOutcome(
                    ok=False,
                    started_at=self.clock(),
                    duration_ms=0,
                    error_kind="invalid_url",
                    error_message="webhook schedule has no target",
                )
            )
        result = await self.deliverer.deliver(
            Delivery(
                url=spec.target.url,
                body=payload_bytes(run),
                secrets=list(spec.secrets),
                webhook_id=run.id,
                event_type=EVENT_TYPE_TRIGGERED,
                attempt=attempt_number,
                headers=dict(spec.target.headers),
                timeout_seconds=float(spec.target.timeout_seconds),
            )
        )
        return ActionResult(
            AttemptOutcome(
                ok=result.ok,
                started_at=result.started_at,
                duration_ms=max(int(result.duration_ms), 0),
                status_code=result.status_code,
                error_kind=None if result.ok else (result.error_kind or "error"),
                error_message=result.error_message,
                response_excerpt=result.response_excerpt,
                retryable=result.retryable,
                retry_after_seconds=result.retry_after_seconds,
            )
        )


class EventAction:
    def __init__(self, clock: Clock = _utc_now) -> None:
        self.clock = clock

    def concurrency_key(self, spec: DeliverySpec) -> str:
        return "event"

    async def perform(self, run: Run, spec: DeliverySpec, attempt_number: int) -> ActionResult:
        now = self.clock()
        event = DomainEvent(
            # Stable per run: a redone attempt writes the same id (outbox ignores the twin).
            id=stable_id("evt", run.id, EVENT_TYPE_TRIGGERED),
            type=EVENT_TYPE_TRIGGERED,
            tenant_id=run.tenant_id,
            time=now,
            schedule_id=run.schedule_id,
            data=run.payload if isinstance(run.payload, dict) else {"payload": run.payload},
            run_id=run.id,
            scheduled_for=run.scheduled_for,
        )
        return ActionResult(AttemptOutcome(ok=True, started_at=now, duration_ms=0), (event,))


class ActionRouter:
    def __init__(self, webhook: ActionPerformer, event: ActionPerformer | None = None) -> None:
        self.webhook = webhook
        self.event = event or EventAction()

    def _for(self, spec: DeliverySpec) -> ActionPerformer:
        return self.event if spec.action is Action.EVENT else self.webhook

    def concurrency_key(self, spec: DeliverySpec) -> str:
        return self._for(spec).concurrency_key(spec)

    async def perform(self, run: Run, spec: DeliverySpec, attempt_number: int) -> ActionResult:
        return await self._for(spec).perform(run, spec, attempt_number)
