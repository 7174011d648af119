"""The three consumers (events fan-out, alert requests, the scheduler's flow-control events):
eventbus's `BatchConsumer` with this service's parsing and handlers; runtime.py runs each `step`
in a servicekit `WorkerLoop`. A batch whose handler fails is retried whole before anything new
is polled, so its offsets are never committed past records not handled; handlers are idempotent
(the fan-out's unique (event, subscription) key, the alert requests' dedup id, a destination
event's time)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from prometheus_client import Counter

from eventbus import BatchConsumer, EnvelopeError, Record
from eventbus.envelope import decode
from eventbus.ports import Consumer
from notification.domain.alerts import AlertRequest, InvalidAlertRequest, parse_alert_request
from notification.domain.destinations import (
    DestinationEvent,
    InvalidDestinationEvent,
    parse_destination_event,
)
from notification.service_layer.alerting import AlertService
from notification.service_layer.fanout import FanOut, IncomingEvent
from notification.service_layer.flow_ports import DestinationStore
from notification.service_layer.ports import Clock

log = logging.getLogger(__name__)

CONSUMED = Counter(
    "notification_records_consumed_total", "Bus records consumed", ["topic", "outcome"]
)
DELIVERIES_CREATED = Counter(
    "notification_deliveries_created_total", "webhook_deliveries rows created by fan-out"
)


def _count_malformed(record: Record) -> None:
    CONSUMED.labels(record.topic, "malformed").inc()


def _count_handled(records: Sequence[Record]) -> None:
    for record in records:
        CONSUMED.labels(record.topic, "ok").inc()


class EventFanOutWorker(BatchConsumer[IncomingEvent]):
    """Consumes event topics; commits offsets only after the deliveries rows are durable."""

    def __init__(
        self, consumer: Consumer, fanout: FanOut, *, batch_size: int, poll_seconds: float = 1.0
    ) -> None:
        super().__init__(
            consumer,
            parse=_incoming_event,
            handle=self._fan_out,
            name="fanout",
            max_records=batch_size,
            poll_seconds=poll_seconds,
            on_malformed=_count_malformed,
            on_handled=_count_handled,
            logger=log,
        )
        self.fanout = fanout

    async def _fan_out(self, events: Sequence[IncomingEvent]) -> None:
        DELIVERIES_CREATED.inc(await self.fanout.handle(events))


class DestinationEventsWorker(BatchConsumer[DestinationEvent]):
    """Consumes `destination-events` (domain/destinations.py) into notification's copy of the
    tenants' destination policies and holds; commits after they are written."""

    def __init__(
        self,
        consumer: Consumer,
        store: DestinationStore,
        clock: Clock,
        *,
        batch_size: int,
        poll_seconds: float = 1.0,
    ) -> None:
        super().__init__(
            consumer,
            parse=_parse_destination_event,
            handle=self._apply,
            name="destinations",
            max_records=batch_size,
            poll_seconds=poll_seconds,
            malformed=(EnvelopeError, InvalidDestinationEvent),
            on_malformed=_count_malformed,
            on_handled=_count_handled,
            logger=log,
        )
        self.store = store
        self.clock = clock

    async def _apply(self, events: Sequence[DestinationEvent]) -> None:
        await self.store.apply_events(events, self.clock())


class AlertRequestWorker(BatchConsumer[AlertRequest]):
    """Consumes `notification-requests`; commits after the alerts are recorded."""

    def __init__(
        self,
        consumer: Consumer,
        alerts: AlertService,
        *,
        batch_size: int,
        poll_seconds: float = 1.0,
    ) -> None:
        super().__init__(
            consumer,
            parse=_parse_alert_request,
            handle=self._record_alerts,
            name="alert-requests",
            max_records=batch_size,
            poll_seconds=poll_seconds,
            malformed=(EnvelopeError, InvalidAlertRequest),
            on_malformed=_count_malformed,
            on_handled=_count_handled,
            logger=log,
        )
        self.alerts = alerts

    async def _record_alerts(self, requests: Sequence[AlertRequest]) -> None:
        for request in requests:
            await self.alerts.handle(request)


def _incoming_event(record: Record) -> IncomingEvent:
    env = decode(record.value)
    return IncomingEvent(env["id"], env["type"], env["tenant_id"], record.value)


def _parse_destination_event(record: Record) -> DestinationEvent:
    return parse_destination_event(decode(record.value))


def _parse_alert_request(record: Record) -> AlertRequest:
    position = f"{record.topic}:{record.partition}:{record.offset}"
    return parse_alert_request(decode(record.value, require_envelope=False), position)
