"""The attempt of an `action=event` run: publish `schedule.triggered` and wait for the bus's
acknowledgement (DESIGN §6, §9; ADR-0032 "two complementary paths").

`PublishingEventAction` is the `ActionPerformer` (service_layer/run_ports) the dispatcher's
`ActionRouter` takes as its `event` performer; `perform_event_action` is the same attempt as a
plain function.

The run succeeds only when the broker acknowledges (Kafka acks=all) or the in-process bus takes
the event; a bus failure is a retryable attempt (`error_kind="broker"`), so the run's retry policy
applies as for a webhook. Every attempt of a run publishes the same event `id`
(`stable_id("evt", run_id, "schedule.triggered")`, the scheme of the run's other events), so a
consumer that sees a retried publish twice can deduplicate.

The event goes to the bus directly, not through the outbox: the outcome the run records IS the
acknowledgement, and the run's own transaction records it afterwards.

Envelope: `{"id", "type": "schedule.triggered", "tenant_id", "time", "schedule_id", "run_id",
"scheduled_for", "data"}`, times in UTC with `+00:00` as the outbox's envelopes. `data` is the
schedule's payload when it is a JSON object; `null` becomes `{}` and any other JSON value is
wrapped as `{"payload": value}` (consumers may rely on `data` being an object).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from eventbus import EnvelopeError, Message, Publisher, PublishError, encode, envelope
from scheduler.domain.events import SCHEDULE_EVENTS_TOPIC, SCHEDULE_TRIGGERED
from scheduler.domain.run import AttemptOutcome, Run
from scheduler.service_layer.run_ports import ActionResult, DeliverySpec
from servicekit.data.ids import is_id, stable_id
from webhookdeliver import bound_error_message

# Bound on one attempt (seconds). The Kafka publisher bounds itself too (request timeout + 5 s);
# this also bounds any other Publisher.
DEFAULT_TIMEOUT_SECONDS = 35.0

ERROR_BROKER = "broker"  # not acknowledged: retryable
ERROR_TIMEOUT = "timeout"  # no answer within the bound: retryable
ERROR_EVENT_INVALID = "event_invalid"  # the bus can never take it (too large): not retryable


def triggered_event_id(run_id: str) -> str:
    """The run's `schedule.triggered` id: the same for every attempt, derived like the ids of
    `schedule.run.succeeded` / `failed` (domain.run), so no two events share one."""
    if not is_id(run_id, "run"):
        raise ValueError(f"not a run id: {run_id!r}")
    return stable_id("evt", run_id, SCHEDULE_TRIGGERED)


def event_data(payload: Any) -> dict[str, Any]:
    """The envelope's `data` for a schedule payload (always a JSON object)."""
    if payload is None:
        return {}
    if isinstance(payload, dict):
        return payload
    return {"payload": payload}


def triggered_message(
    *,
    run_id: str,
    tenant_id: str,
    schedule_id: str,
    scheduled_for: datetime,
    payload: Any,
    now: datetime,
) -> Message:
    """The `schedule.triggered` message of a run, keyed by schedule id. Raises EnvelopeError when
    the payload cannot be encoded within the bus's size limit."""
    value = envelope(
        id=triggered_event_id(run_id),
        type=SCHEDULE_TRIGGERED,
        tenant_id=tenant_id,
        time=now.astimezone(UTC),
        schedule_id=schedule_id,
        run_id=run_id,
        scheduled_for=scheduled_for.astimezone(UTC),
        data=event_data(payload),
    )
    return Message(topic=SCHEDULE_EVENTS_TOPIC, key=schedule_id, value=encode(value))


async def perform_event_action(
    publisher: Publisher,
    *,
    run_id: str,
    tenant_id: str,
    schedule_id: str,
    scheduled_for: datetime,
    payload: Any,
    now: datetime,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> AttemptOutcome:
    """Publish the run's `schedule.triggered` and report the attempt.

    ok=True only after the bus acknowledged. Bus failure or timeout: ok=False, retryable=True.
    An event the bus can never take (over 1 MiB encoded): ok=False, retryable=False.
    `now` is the attempt's start (the event's `time`); `monotonic` measures its duration.
    """
    began = monotonic()

    def outcome(ok: bool, kind: str | None = None, message: str | None = None) -> AttemptOutcome:
        return AttemptOutcome(
            ok=ok,
            started_at=now,
            duration_ms=max(0, round((monotonic() - began) * 1000)),
            error_kind=kind,
            error_message=bound_error_message(message),
            retryable=kind in (ERROR_BROKER, ERROR_TIMEOUT),
        )

    try:
        message = triggered_message(
            run_id=run_id,
            tenant_id=tenant_id,
            schedule_id=schedule_id,
            scheduled_for=scheduled_for,
            payload=payload,
            now=now,
        )
    except EnvelopeError as exc:
        return outcome(False, ERROR_EVENT_INVALID, str(exc))
    try:
        async with asyncio.timeout(timeout_seconds):
            await publisher.publish([message])
    except PublishError as exc:
        return outcome(False, ERROR_BROKER, str(exc))
    except TimeoutError:
        return outcome(False, ERROR_TIMEOUT, f"not acknowledged within {timeout_seconds:g} s")
    return outcome(True)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class PublishingEventAction:
    """`ActionPerformer` of `action=event`: one attempt publishes the run's `schedule.triggered`
    and succeeds only when the bus acknowledges. No outbox events: the acknowledgement is the
    outcome. Use ONE publisher per process (the relay's), started before the dispatcher."""

    def __init__(
        self,
        publisher: Publisher,
        clock: Callable[[], datetime] = _utc_now,
        *,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.publisher = publisher
        self.clock = clock
        self.timeout_seconds = timeout_seconds

    def concurrency_key(self, spec: DeliverySpec) -> str:
        # Every event run shares the bus: one limit for all of them.
        return "event"

    async def perform(
        self,
        run: Run,
        spec: DeliverySpec,
        attempt_number: int,
        *,
        completion_token: str | None = None,  # webhooks only: an event has no receiver to call
    ) -> ActionResult:
        outcome = await perform_event_action(
            self.publisher,
            run_id=run.id,
            tenant_id=run.tenant_id,
            schedule_id=run.schedule_id,
            scheduled_for=run.scheduled_for,
            payload=run.payload,
            now=self.clock(),
            timeout_seconds=self.timeout_seconds,
        )
        return ActionResult(outcome)
