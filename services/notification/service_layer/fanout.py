"""Matching and fan-out: one `webhook_deliveries` row per (event, matching subscription).

The caller commits the bus offsets only after `handle` returns, i.e. after the rows are durable;
a crash in between re-reads the events and the unique (event_id, subscription_id) key turns the
second insert into a no-op.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from notification.domain.subscriptions import delivery_id, matches
from notification.service_layer.ports import Clock, NewDelivery, NotificationStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IncomingEvent:
    id: str
    type: str
    tenant_id: str
    raw: bytes  # the envelope exactly as consumed: it is the delivery body


class FanOut:
    def __init__(self, store: NotificationStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    async def handle(self, events: Sequence[IncomingEvent]) -> int:
        """Insert the deliveries of a batch of events; returns how many rows were new."""
        if not events:
            return 0
        subs = await self.store.enabled_subscriptions({e.tenant_id for e in events})
        by_tenant: dict[str, list[tuple[str, list[str]]]] = {}
        for sub in subs:
            by_tenant.setdefault(sub.tenant_id, []).append((sub.id, sub.event_types))
        rows = [
            NewDelivery(
                id=delivery_id(event.id, sub_id),
                tenant_id=event.tenant_id,
                subscription_id=sub_id,
                event_id=event.id,
                event_type=event.type,
                body=event.raw,
            )
            for event in events
            for sub_id, filters in by_tenant.get(event.tenant_id, [])
            if matches(filters, event.type)
        ]
        return await self.store.insert_deliveries(rows, self.clock())
