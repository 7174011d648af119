"""The JSON event envelope both services publish and consume (DESIGN §9).

`{"id": "evt_…", "type", "tenant_id", "time", "data": {…}, ...}` plus optional top-level fields
such as `schedule_id`, `run_id` and `scheduled_for`. Times are written RFC 3339 UTC with `Z`
(`servicekit.data.timestamps`, the style of every API response too); any explicit offset is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from eventbus.errors import EnvelopeError
from eventbus.limits import MAX_MESSAGE_BYTES
from servicekit.data.timestamps import format_utc

REQUIRED_FIELDS: tuple[str, ...] = ("id", "type", "tenant_id", "time", "data")


def format_time(value: datetime) -> str:
    """RFC 3339 UTC with `Z`; a naive datetime is refused, never guessed."""
    return format_utc(value)


def parse_time(value: str) -> datetime:
    """Parse an envelope time; refuses one without an offset."""
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError) as exc:
        raise EnvelopeError(f"time {value!r} is not RFC 3339") from exc
    if parsed.tzinfo is None:
        raise EnvelopeError(f"time {value!r} has no UTC offset")
    return parsed


def envelope(
    *,
    id: str,
    type: str,
    tenant_id: str,
    time: datetime,
    data: Mapping[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    """Build an envelope; datetimes among `extra` (e.g. `scheduled_for`) are formatted too."""
    for name, text in (("id", id), ("type", type), ("tenant_id", tenant_id)):
        if not isinstance(text, str) or not text:
            raise ValueError(f"envelope {name} must be a non-empty string")
    result: dict[str, Any] = {
        "id": id,
        "type": type,
        "tenant_id": tenant_id,
        "time": format_time(time),
    }
    for name, value in extra.items():
        result[name] = format_time(value) if isinstance(value, datetime) else value
    result["data"] = dict(data)
    return result


def encode(value: Mapping[str, Any], *, max_bytes: int = MAX_MESSAGE_BYTES) -> bytes:
    """Compact UTF-8 JSON; refuses NaN and values over `max_bytes` (the bus would refuse them)."""
    try:
        raw = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
            "utf-8"
        )
    except (TypeError, ValueError) as exc:
        raise EnvelopeError(f"event is not JSON-serialisable: {exc}") from exc
    if len(raw) > max_bytes:
        raise EnvelopeError(f"encoded event is {len(raw)} bytes, over the {max_bytes}-byte limit")
    return raw


def decode(
    value: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES, require_envelope: bool = True
) -> dict[str, Any]:
    """Parse one consumed value; with `require_envelope` also check the envelope's fields.

    The size is checked before parsing so a hostile producer cannot make a consumer parse an
    unbounded document.
    """
    if len(value) > max_bytes:
        raise EnvelopeError(f"event is {len(value)} bytes, over the {max_bytes}-byte limit")
    try:
        parsed = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EnvelopeError(f"event is not UTF-8 JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise EnvelopeError(f"event is a JSON {type(parsed).__name__}, not an object")
    if require_envelope:
        missing = [name for name in REQUIRED_FIELDS if name not in parsed]
        if missing:
            raise EnvelopeError(f"event lacks field(s) {', '.join(missing)}")
        for name in ("id", "type", "tenant_id", "time"):
            if not isinstance(parsed[name], str) or not parsed[name]:
                raise EnvelopeError(f"event field {name!r} must be a non-empty string")
        if not isinstance(parsed["data"], dict):
            raise EnvelopeError("event field 'data' must be an object")
        parse_time(parsed["time"])
    return parsed
