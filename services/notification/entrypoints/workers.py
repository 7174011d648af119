"""The two consumers (events fan-out, alert requests). Each `run_once` does one bounded step and
returns how many records it handled; runtime.py runs it in a servicekit `WorkerLoop`."""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from prometheus_client import Counter

from eventbus import EnvelopeError, Record
from eventbus.envelope import decode
from eventbus.ports import Consumer
from notification.domain.alerts import AlertRequest, InvalidAlertRequest, parse_alert_request
from notification.service_layer.alerting import AlertService
from notification.service_layer.fanout import FanOut, IncomingEvent

log = logging.getLogger(__name__)

CONSUMED = Counter(
    "notification_records_consumed_total", "Bus records consumed", ["topic", "outcome"]
)
DELIVERIES_CREATED = Counter(
    "notification_deliveries_created_total", "webhook_deliveries rows created by fan-out"
)


T = TypeVar("T")


def _well_formed(
    records: Sequence[Record],
    parse: Callable[[Record], T],
    errors: tuple[type[Exception], ...],
    what: str,
) -> Iterator[tuple[Record, T]]:
    """Parse each record; a poison message is skipped (and counted), never retried forever. A
    record counts as "ok" once the caller's loop body for it has run."""
    for record in records:
        try:
            item = parse(record)
        except errors as exc:
            log.warning("skipping malformed %s", what, extra={"error": str(exc)})
            CONSUMED.labels(record.topic, "malformed").inc()
            continue
        yield record, item
        CONSUMED.labels(record.topic, "ok").inc()


class _BatchConsumerWorker(abc.ABC):
    """Poll a batch, handle it, then commit the offsets: a crash before the commit re-reads the
    batch, so handlers must be idempotent."""

    def __init__(self, consumer: Consumer, *, batch_size: int) -> None:
        self.consumer = consumer
        self.batch_size = batch_size

    async def run_once(self, timeout_seconds: float = 0.0) -> int:
        records = await self.consumer.poll(
            max_records=self.batch_size, timeout_seconds=timeout_seconds
        )
        if not records:
            return 0
        await self._handle(records)
        await self.consumer.commit()
        return len(records)

    @abc.abstractmethod
    async def _handle(self, records: Sequence[Record]) -> None: ...


class EventFanOutWorker(_BatchConsumerWorker):
    """Consumes event topics; commits offsets only after the deliveries rows are durable."""

    def __init__(self, consumer: Consumer, fanout: FanOut, *, batch_size: int) -> None:
        super().__init__(consumer, batch_size=batch_size)
        self.fanout = fanout

    async def _handle(self, records: Sequence[Record]) -> None:
        events = [
            IncomingEvent(env["id"], env["type"], env["tenant_id"], record.value)
            for record, env in _well_formed(
                records, lambda r: decode(r.value), (EnvelopeError,), "event"
            )
        ]
        DELIVERIES_CREATED.inc(await self.fanout.handle(events))


class AlertRequestWorker(_BatchConsumerWorker):
    """Consumes `notification-requests`; commits after the alerts are recorded."""

    def __init__(self, consumer: Consumer, alerts: AlertService, *, batch_size: int) -> None:
        super().__init__(consumer, batch_size=batch_size)
        self.alerts = alerts

    async def _handle(self, records: Sequence[Record]) -> None:
        for _, request in _well_formed(
            records, _parse_alert_request, (EnvelopeError, InvalidAlertRequest), "alert request"
        ):
            await self.alerts.handle(request)


def _parse_alert_request(record: Record) -> AlertRequest:
    position = f"{record.topic}:{record.partition}:{record.offset}"
    return parse_alert_request(decode(record.value, require_envelope=False), position)
