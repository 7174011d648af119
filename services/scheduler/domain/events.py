"""Domain events: what happened, recorded by aggregates and written to the outbox by the unit of
work in the same transaction as the state change (DESIGN.md §9). No I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

SCHEDULE_EVENTS_TOPIC = "schedule-events"
NOTIFICATION_REQUESTS_TOPIC = "notification-requests"
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

    @property
    def key(self) -> str:
        return self.schedule_id
