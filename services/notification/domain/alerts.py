"""Alert requests (topic `notification-requests`): parsing and dedup identity. Pure, no I/O.

Accepted shapes (both JSON objects):
- bare: `{"tenant_id", "channels": ["email", "in_app"], "template", "data": {...}, "id"?}`
- wrapped in the §9 envelope: `{"id": "evt_…", "type", "tenant_id", "time", "data": <bare>}`;
  the envelope's `id` is the dedup key and its `tenant_id` is used when the inner one is absent.
A bare request without `id` is deduplicated by its bus position (topic/partition/offset), which
is stable when a consumer re-reads after a crash.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

_TEMPLATE = re.compile(r"^[a-z0-9_]{1,64}$")
MAX_ID_CHARS = 200


class Channel(StrEnum):
    EMAIL = "email"
    IN_APP = "in_app"


class InvalidAlertRequest(ValueError):
    """The message is not an alert request we can act on (it is logged and skipped)."""


@dataclass(frozen=True)
class AlertRequest:
    id: str
    tenant_id: str
    channels: frozenset[Channel]
    template: str
    data: Mapping[str, Any] = field(default_factory=dict)


def _str(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) and value else None


def parse_alert_request(value: object, position_id: str) -> AlertRequest:
    if not isinstance(value, dict):
        raise InvalidAlertRequest("alert request is not a JSON object")
    outer: dict[str, Any] = value
    inner: dict[str, Any] = outer
    if "template" not in outer and isinstance(outer.get("data"), dict):
        inner = outer["data"]
    template = _str(inner, "template")
    if template is None or not _TEMPLATE.match(template):
        raise InvalidAlertRequest("missing or malformed 'template'")
    tenant_id = _str(inner, "tenant_id") or _str(outer, "tenant_id")
    if tenant_id is None:
        raise InvalidAlertRequest("missing 'tenant_id'")
    raw_channels = inner.get("channels", [Channel.EMAIL.value, Channel.IN_APP.value])
    if not isinstance(raw_channels, list):
        raise InvalidAlertRequest("'channels' must be a list")
    try:
        channels = frozenset(Channel(c) for c in raw_channels)
    except ValueError as exc:
        raise InvalidAlertRequest(f"unknown channel in {raw_channels!r}") from exc
    data = inner.get("data", {})
    if not isinstance(data, dict):
        raise InvalidAlertRequest("'data' must be an object")
    ident = _str(outer, "id") or _str(inner, "id") or position_id
    return AlertRequest(ident[:MAX_ID_CHARS], tenant_id, channels, template, data)


class EmailStatus(StrEnum):
    """An outbound email: `pending` until sent, or `failed` once its attempts are spent."""

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


EMAIL_RETRY_SECONDS = (30, 120, 600, 1800, 3600)
"""Waits after attempt 1, 2, ...; the last one repeats until the attempts are spent."""


def email_retry_seconds(attempts_made: int, max_attempts: int) -> int | None:
    """The wait before the next attempt of an email whose `attempts_made`-th attempt failed,
    or None when that was its last."""
    if attempts_made >= max_attempts:
        return None
    return EMAIL_RETRY_SECONDS[min(attempts_made, len(EMAIL_RETRY_SECONDS)) - 1]
