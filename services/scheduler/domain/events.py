"""Domain events: what happened, recorded by aggregates and written to the outbox by the unit of
work in the same transaction as the state change (DESIGN.md §9). No I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

SCHEDULE_EVENTS_TOPIC = "schedule-events"
NOTIFICATION_REQUESTS_TOPIC = "notification-requests"
DESTINATION_EVENTS_TOPIC = "destination-events"
DESTINATION_UPDATED = "destination.updated"
DESTINATION_DELETED = "destination.deleted"
DESTINATION_HELD = "destination.held"
SCHEDULE_TRIGGERED = "schedule.triggered"
"""An `action=event` run's event (and a webhook delivery's X-Event-Type)."""


@dataclass(frozen=True)
class DomainEvent:
    """One event of the schedule-events topic (or an alert request), before serialisation.

    `id` is stable for what it describes (e.g. the run id for schedule.triggered) so consumers can
    deduplicate; `key` orders events per schedule on the bus.
    """

    id: str
    type: str
    tenant_id: str
    time: datetime
    schedule_id: str
    data: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    scheduled_for: datetime | None = None
    topic: str = SCHEDULE_EVENTS_TOPIC
    partition_key: str | None = None
    """The bus key when the event is not a schedule's (a destination's)."""

    @property
    def key(self) -> str:
        return self.partition_key or self.schedule_id


def destination_event(
    event_id: str, type_: str, tenant_id: str, time: datetime, data: Mapping[str, Any]
) -> DomainEvent:
    """A flow-control event (DESIGN §7b): `data` names the `destination` (host:port) and
    carries the policy (`destination.updated`: `max_in_flight`, `per_second`) or the hold
    (`destination.held`: `held_until`), so notification's deliveries obey the same limits.
    Keyed by (tenant, destination), holds apart: a destination's policy changes stay in order,
    and on a compacted topic its latest policy is kept whatever holds came after it."""
    key = f"{tenant_id}|{data['destination']}"  # a destination never holds "|"
    return DomainEvent(
        id=event_id,
        type=type_,
        tenant_id=tenant_id,
        time=time,
        schedule_id="",
        data=data,
        topic=DESTINATION_EVENTS_TOPIC,
        partition_key=f"{key}|held" if type_ == DESTINATION_HELD else key,
    )
