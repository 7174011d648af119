"""Flow control's events from the scheduler (topic `destination-events`, DESIGN §7b "Flow
control"): the policy a tenant set for a destination through the scheduler's
`/v1/destinations` API, and the holds the scheduler's deliveries met. Notification keeps its
own copy of both (its `destinations` table), so its fan-out deliveries to the same tenant and
destination obey the same limits. Pure, no I/O.

- `destination.updated` `data: {"destination", "max_in_flight", "per_second"}`: the policy.
- `destination.deleted` `data: {"destination"}`: the defaults apply again.
- `destination.held` `data: {"destination", "held_until"}`: a 429/503 with Retry-After the
  scheduler saw; a hold only ever lengthens (as `servicekit.flow.react` keeps it). Notification
  publishes the holds its own deliveries meet the same way, with `"origin": "notification"`
  (adapters/hold_events.py), for the scheduler; reading its own back changes nothing.

A policy event older (by its `time`) than the one the copy holds changes nothing, so a re-read
or reordered event cannot bring an old policy back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from servicekit.data.timestamps import parse_utc
from servicekit.flow import MAX_HOLD_SECONDS, DestinationPolicy, parse_destination, tenant_policy

UPDATED = "destination.updated"
DELETED = "destination.deleted"
HELD = "destination.held"
TYPES = (UPDATED, DELETED, HELD)
NOTIFICATION_ORIGIN = "notification"
"""The envelope's `origin` on the holds notification publishes."""


class InvalidDestinationEvent(ValueError):
    """Not a flow-control event we can act on (it is logged and skipped)."""


@dataclass(frozen=True, slots=True)
class DestinationEvent:
    id: str
    type: str
    tenant_id: str
    time: datetime
    destination: str
    policy: DestinationPolicy | None = None
    """`destination.updated`: the tenant's policy."""
    held_until: datetime | None = None
    """`destination.held`: the hold's end."""


def parse_destination_event(env: Mapping[str, Any]) -> DestinationEvent:
    """One decoded envelope as a `DestinationEvent`, or InvalidDestinationEvent."""
    kind = env.get("type")
    if kind not in TYPES:
        raise InvalidDestinationEvent(f"not a destination event type: {kind!r}")
    data = env.get("data")
    if not isinstance(data, Mapping):
        raise InvalidDestinationEvent("data must be an object")
    try:
        destination = parse_destination(str(data.get("destination", "")))
        time = parse_utc(env.get("time"))
        policy = held_until = None
        if kind == UPDATED:
            per_second = data.get("per_second")
            policy = tenant_policy(
                int(data["max_in_flight"]), None if per_second is None else float(per_second)
            )
        elif kind == HELD:
            held_until = parse_utc(data.get("held_until"))
            if (held_until - time).total_seconds() > MAX_HOLD_SECONDS:
                raise ValueError("a hold is at most 1 h")
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidDestinationEvent(f"{kind}: {exc}") from exc
    return DestinationEvent(
        id=str(env["id"]),
        type=str(kind),
        tenant_id=str(env["tenant_id"]),
        time=time,
        destination=destination,
        policy=policy,
        held_until=held_until,
    )
