"""A hold that notification's deliveries met, as the scheduler reads it (DESIGN.md §7b "Flow
control"): a `destination.held` envelope on `destination-events` with `"origin":
"notification"`, `data: {"destination", "held_until"}`. The scheduler publishes its own holds
on the same topic for notification and ignores those (no origin). Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.domain.events import DESTINATION_HELD
from servicekit.data.timestamps import parse_utc
from servicekit.flow import MAX_HOLD_SECONDS, parse_destination

NOTIFICATION_ORIGIN = "notification"


@dataclass(frozen=True, slots=True)
class DestinationHold:
    tenant_id: str
    destination: str
    held_until: datetime


def is_foreign_hold(env: Mapping[str, Any]) -> bool:
    """Whether the envelope is a hold another service tells the scheduler of."""
    return env.get("type") == DESTINATION_HELD and env.get("origin") == NOTIFICATION_ORIGIN


def parse_hold(env: Mapping[str, Any]) -> DestinationHold:
    """The hold an envelope carries, or ValueError (the event is logged and skipped)."""
    data = env.get("data")
    if not isinstance(data, Mapping):
        raise ValueError("data must be an object")
    tenant_id = env.get("tenant_id")
    if not isinstance(tenant_id, str) or not tenant_id:
        raise ValueError("tenant_id must be a non-empty string")
    destination = parse_destination(str(data.get("destination", "")))
    time, until = parse_utc(env.get("time")), parse_utc(data.get("held_until"))
    if (until - time).total_seconds() > MAX_HOLD_SECONDS:
        raise ValueError("a hold is at most 1 h")
    return DestinationHold(tenant_id, destination, until)
