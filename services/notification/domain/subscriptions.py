"""Subscription filters and matching: which events go to which endpoint. Pure, no I/O."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

# An event type is dotted lowercase words (`schedule.run.failed`); a filter is one, or a prefix
# ending in `*` (`schedule.*`, `schedule.run.*`), or `*` alone (everything of the tenant).
_TYPE = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")
_PREFIX = re.compile(r"^([a-z0-9_]+\.)*\*$")
MAX_FILTERS = 50  # bound per subscription: matching cost grows with it
MAX_FILTER_CHARS = 200


class InvalidEventTypeFilter(ValueError):
    """A filter is not an exact event type or a prefix ending in `*`."""


def normalize_filters(filters: Iterable[str]) -> list[str]:
    """Validate and deduplicate filters, keeping their order; raise on the first bad one."""
    seen: list[str] = []
    for raw in filters:
        value = raw.strip()
        if len(value) > MAX_FILTER_CHARS or not (_TYPE.match(value) or _PREFIX.match(value)):
            raise InvalidEventTypeFilter(
                f"{raw!r} is not an event type or a prefix ending in '*' (e.g. 'schedule.*')"
            )
        if value not in seen:
            seen.append(value)
    if not seen:
        raise InvalidEventTypeFilter("at least one event type filter is required")
    if len(seen) > MAX_FILTERS:
        raise InvalidEventTypeFilter(f"at most {MAX_FILTERS} event type filters")
    return seen


def matches(filters: Sequence[str], event_type: str) -> bool:
    """True when `event_type` equals a filter, or starts with a `*` filter's prefix."""
    for f in filters:
        if f.endswith("*"):
            if event_type.startswith(f[:-1]):
                return True
        elif f == event_type:
            return True
    return False


def delivery_id(event_id: str, subscription_id: str) -> str:
    """Deterministic per (event, subscription): it is the `X-Webhook-Id` receivers dedup on, and
    a re-read event (consumer crash before commit) maps to the same row."""
    digest = hashlib.sha256(f"{event_id}\x00{subscription_id}".encode()).hexdigest()
    return f"msg_{digest[:32]}"
