"""Opaque list cursors: URL-safe base64 of the last item's (created_at, id) sort key."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime

from scheduler.service_layer.errors import InvalidInput

MAX_CURSOR_CHARS = 512


def encode_cursor(created_at: datetime, id_: str) -> str:
    raw = json.dumps([created_at.isoformat(), id_], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(cursor.encode("ascii") + b"=" * (-len(cursor) % 4))
        stamp, id_ = json.loads(raw)
        when = datetime.fromisoformat(stamp)
        if when.tzinfo is None or not isinstance(id_, str):
            raise ValueError("bad cursor")
        return when, id_
    except (ValueError, TypeError, binascii.Error, UnicodeError):
        raise InvalidInput("cursor", "is not a cursor returned by this API") from None
