"""Notification's holds told to the scheduler: a `destination.held` event on
`destination-events` (DESIGN.md §7b; domain/destinations.py), with `"origin": "notification"`
so the scheduler tells it from its own (which it publishes for notification, not for itself).

Published at once, not through an outbox: a hold is a transient signal (an hour at most) whose
loss costs one more answer from the destination, which the scheduler's own deliveries will
get. It is told after a completion write, on the dispatcher's write path: the wait is bounded
by `PUBLISH_TIMEOUT_SECONDS` (a broker that does not answer delays that write by no more), and
a failure is logged by the caller.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from eventbus import Message, Publisher, encode, envelope
from notification.domain.destinations import HELD, NOTIFICATION_ORIGIN
from notification.service_layer.flow_ports import Key
from servicekit.data.ids import new_id

PUBLISH_TIMEOUT_SECONDS = 2.0


class HoldEvents:
    """`HoldAnnouncer` on the bus (started and stopped with the service's consumers)."""

    def __init__(self, publisher: Publisher, topic: str) -> None:
        self.publisher = publisher
        self.topic = topic

    async def held(self, key: Key, until: datetime, now: datetime) -> None:
        tenant_id, destination = key
        value = envelope(
            id=new_id("evt", at=now),
            type=HELD,
            tenant_id=tenant_id,
            time=now,
            data={"destination": destination, "held_until": until.isoformat()},
            origin=NOTIFICATION_ORIGIN,
        )
        # The scheduler's key for a destination's holds: they stay in order per destination.
        message = Message(self.topic, f"{tenant_id}|{destination}|held", encode(value))
        await asyncio.wait_for(self.publisher.publish([message]), PUBLISH_TIMEOUT_SECONDS)
