"""Subscription filters and matching: which events go to which endpoint. Pure, no I/O."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from servicekit.data.ids import stable_id

# An event type is dotted lowercase words (`schedule.run.failed`); a filter is one, or a prefix
# ending in `*` (`schedule.*`, `schedule.run.*`), or `*` alone (everything of the tenant).
_TYPE = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")
_PREFIX = re.compile(r"^([a-z0-9_]+\.)*\*$")
MAX_FILTERS = 50  # bound per subscription: matching cost grows with it
MAX_FILTER_CHARS = 200


class InvalidEventTypeFilter(ValueError):
    """A filter is not a known event type or a prefix ending in `*` that matches one."""


def normalize_filters(filters: Iterable[str], *, known: Sequence[str]) -> list[str]:
    """Validate and deduplicate filters, keeping their order; raise on the first bad one.

    `known` is the event catalogue of the topics this service fans out: an exact filter must be
    one of them and a `*` filter must match at least one, or the subscription would never fire.
    """
    seen: list[str] = []
    for raw in filters:
        value = raw.strip()
        if len(value) > MAX_FILTER_CHARS or not (_TYPE.match(value) or _PREFIX.match(value)):
            raise InvalidEventTypeFilter(
                f"{raw!r} is not an event type or a prefix ending in '*' (e.g. 'schedule.*')"
            )
        if not matches_any(value, known):
            raise InvalidEventTypeFilter(
                f"{value!r} matches no known event type; known types: {', '.join(known)}"
                " (or a prefix of them ending in '*', e.g. 'schedule.*')"
            )
        if value not in seen:
            seen.append(value)
    if not seen:
        raise InvalidEventTypeFilter("at least one event type filter is required")
    if len(seen) > MAX_FILTERS:
        raise InvalidEventTypeFilter(f"at most {MAX_FILTERS} event type filters")
    return seen


def matches_any(filter_: str, event_types: Sequence[str]) -> bool:
    """True when one filter matches at least one of `event_types`."""
    return any(matches((filter_,), t) for t in event_types)


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
    return stable_id("dlv", event_id, subscription_id)
