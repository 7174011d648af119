"""Background loops: the two consumers (events fan-out, alert requests), the dispatcher and the
email sender. Each `run_once` does one bounded step; `run_forever` repeats it until stopped,
waiting `idle_seconds` (or the stop signal) only when a step found nothing to do."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import Counter

from eventbus import EnvelopeError
from eventbus.envelope import decode
from eventbus.ports import Consumer
from notification.domain.alerts import InvalidAlertRequest, parse_alert_request
from notification.service_layer.alerting import AlertService
from notification.service_layer.fanout import FanOut, IncomingEvent

log = logging.getLogger(__name__)

CONSUMED = Counter(
    "notification_records_consumed_total", "Bus records consumed", ["topic", "outcome"]
)
DELIVERIES_CREATED = Counter(
    "notification_deliveries_created_total", "webhook_deliveries rows created by fan-out"
)


class EventFanOutWorker:
    """Consumes event topics; commits offsets only after the deliveries rows are durable."""

    def __init__(self, consumer: Consumer, fanout: FanOut, *, batch_size: int) -> None:
        self.consumer = consumer
        self.fanout = fanout
        self.batch_size = batch_size

    async def run_once(self, timeout_seconds: float = 0.0) -> int:
        records = await self.consumer.poll(
            max_records=self.batch_size, timeout_seconds=timeout_seconds
        )
        if not records:
            return 0
        events = []
        for record in records:
            try:
                env = decode(record.value)
            except EnvelopeError as exc:
                # A poison message is skipped (and counted), never retried forever.
                log.warning("skipping malformed event", extra={"error": str(exc)})
                CONSUMED.labels(record.topic, "malformed").inc()
                continue
            events.append(IncomingEvent(env["id"], env["type"], env["tenant_id"], record.value))
            CONSUMED.labels(record.topic, "ok").inc()
        created = await self.fanout.handle(events)
        DELIVERIES_CREATED.inc(created)
        await self.consumer.commit()
        return len(records)


class AlertRequestWorker:
    """Consumes `notification-requests`; commits after the alerts are recorded."""

    def __init__(self, consumer: Consumer, alerts: AlertService, *, batch_size: int) -> None:
        self.consumer = consumer
        self.alerts = alerts
        self.batch_size = batch_size

    async def run_once(self, timeout_seconds: float = 0.0) -> int:
        records = await self.consumer.poll(
            max_records=self.batch_size, timeout_seconds=timeout_seconds
        )
        if not records:
            return 0
        for record in records:
            position = f"{record.topic}:{record.partition}:{record.offset}"
            try:
                request = parse_alert_request(
                    decode(record.value, require_envelope=False), position
                )
            except (EnvelopeError, InvalidAlertRequest) as exc:
                log.warning("skipping malformed alert request", extra={"error": str(exc)})
                CONSUMED.labels(record.topic, "malformed").inc()
                continue
            await self.alerts.handle(request)
            CONSUMED.labels(record.topic, "ok").inc()
        await self.consumer.commit()
        return len(records)


async def run_forever(
    name: str,
    step: Callable[[], Awaitable[int]],
    stop: asyncio.Event,
    idle_seconds: float,
    max_backoff_seconds: float = 30.0,
) -> None:
    """Repeat `step` until `stop` is set. A failing step is logged and retried with a growing
    pause (capped), so a database or broker outage neither spins nor kills the loop."""
    failures = 0
    while not stop.is_set():
        try:
            done = await step()
            failures = 0
        except asyncio.CancelledError:
            raise
        except Exception:
            failures += 1
            log.exception("worker step failed", extra={"worker": name, "failures": failures})
            done = 0
        if done == 0 or failures:
            pause = min(idle_seconds * (2 ** min(failures, 10)), max_backoff_seconds)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause if failures else idle_seconds)
