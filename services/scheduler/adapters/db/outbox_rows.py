"""The one builder of outbox rows: a domain event as the `outbox` table stores it, its payload
the DESIGN §9 envelope built by `eventbus.envelope` (times in UTC), compact UTF-8 JSON
(`servicekit.data.json_encoding`)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from eventbus import envelope
from scheduler.domain.events import DomainEvent
from servicekit.data.json_encoding import compact_json

OUTBOX_COLUMNS = ("event_id", "topic", "key", "type", "payload", "created_at")


def event_payload(event: DomainEvent) -> str:
    """The published value of an event (what the relay sends, byte for byte)."""
    # A destination's event (flow control) belongs to no schedule.
    extra: dict[str, Any] = {"schedule_id": event.schedule_id} if event.schedule_id else {}
    if event.run_id is not None:
        extra["run_id"] = event.run_id
    if event.scheduled_for is not None:
        extra["scheduled_for"] = event.scheduled_for.astimezone(UTC)
    value = envelope(
        id=event.id,
        type=event.type,
        tenant_id=event.tenant_id,
        time=event.time.astimezone(UTC),
        data=event.data,
        **extra,
    )
    return compact_json(value).decode()


def outbox_row(event: DomainEvent) -> dict[str, Any]:
    return {
        "event_id": event.id,
        "topic": event.topic,
        "key": event.key,
        "type": event.type,
        "payload": event_payload(event),
        "created_at": event.time,
    }
