"""Action performers (service_layer/run_ports.ActionPerformer): what one attempt of a run does.

- `WebhookAction`: POST the run's payload to the schedule's target through `webhookdeliver`
  (SSRF guard, signing with every current secret, no redirects, bounded body and time). Every
  attempt carries X-Webhook-Id = the run id and X-Event-Type = schedule.triggered, and the
  occurrence's context: X-Schedule-Id, X-Scheduled-For (scheduled_for: the occurrence, or the
  instant a manual or replay run was requested) and X-Trigger (the run's trigger).
- Callback mode (DESIGN.md §7b): the attempt also carries X-Run-Complete-Url
  (`{public_url}/v1/runs/{run_id}/complete`) and X-Run-Complete-Token (that attempt's token);
  both are reserved names, so no tenant header can replace them.
- `ActionRouter` picks the performer by the schedule's action: the webhook one, or the event
  one (service_layer/event_action.PublishingEventAction: publish `schedule.triggered`, succeed
  on the bus's acknowledgement).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from scheduler.domain.events import SCHEDULE_TRIGGERED
from scheduler.domain.policies import Action
from scheduler.domain.run import AttemptOutcome, Run
from scheduler.service_layer.run_ports import ActionPerformer, ActionResult, DeliverySpec
from servicekit.data.json_encoding import compact_json
from webhookdeliver import (
    AttemptRecord,
    Deliverer,
    Delivery,
    completion_headers,
    endpoint_key,
    occurrence_headers,
)

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def payload_bytes(run: Run) -> bytes:
    return compact_json(run.payload)


DEFAULT_PUBLIC_URL = "http://127.0.0.1:8089"


def completion_url(public_url: str, run_id: str) -> str:
    """Where a callback-mode run's receiver reports the job's end."""
    return f"{public_url.rstrip('/')}/v1/runs/{run_id}/complete"


class WebhookAction:
    def __init__(
        self, deliverer: Deliverer, clock: Clock = _utc_now, public_url: str = DEFAULT_PUBLIC_URL
    ) -> None:
        self.deliverer = deliverer
        self.clock = clock
        self.public_url = public_url

    def concurrency_key(self, spec: DeliverySpec) -> str:
        if spec.target is None:
            return f"schedule:{spec.schedule_id}"
        return endpoint_key(spec.target.url)

    async def perform(
        self,
        run: Run,
        spec: DeliverySpec,
        attempt_number: int,
        *,
        completion_token: str | None = None,
    ) -> ActionResult:
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
                secrets=spec.secrets,
                webhook_id=run.id,
                event_type=SCHEDULE_TRIGGERED,
                attempt=attempt_number,
                headers=spec.target.headers,
                timeout_seconds=float(spec.target.timeout_seconds),
                context_headers=self._context(run, completion_token),
            )
        )
        # The attempt record shared with notification: it applies the text bounds, once.
        record = AttemptRecord.of(attempt_number, result)
        return ActionResult(
            AttemptOutcome(
                ok=result.ok,
                started_at=record.started_at,
                duration_ms=record.duration_ms,
                status_code=record.status_code,
                error_kind=record.error_kind,
                error_message=record.error_message,
                response_excerpt=record.response_excerpt,
                retryable=result.retryable,
                retry_after_seconds=record.retry_after_seconds,
            )
        )

    def _context(self, run: Run, completion_token: str | None) -> dict[str, str]:
        headers = occurrence_headers(
            schedule_id=run.schedule_id,
            scheduled_for=run.scheduled_for,
            trigger=run.trigger.value,
        )
        if completion_token is not None:
            url = completion_url(self.public_url, run.id)
            headers.update(completion_headers(url=url, token=completion_token))
        return headers


class ActionRouter:
    def __init__(self, webhook: ActionPerformer, event: ActionPerformer) -> None:
        self.webhook = webhook
        self.event = event

    def _for(self, spec: DeliverySpec) -> ActionPerformer:
        return self.event if spec.action is Action.EVENT else self.webhook

    def concurrency_key(self, spec: DeliverySpec) -> str:
        return self._for(spec).concurrency_key(spec)

    async def perform(
        self,
        run: Run,
        spec: DeliverySpec,
        attempt_number: int,
        *,
        completion_token: str | None = None,
    ) -> ActionResult:
        performer = self._for(spec)
        if completion_token is None:
            return await performer.perform(run, spec, attempt_number)
        return await performer.perform(run, spec, attempt_number, completion_token=completion_token)
