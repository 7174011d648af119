"""Opaque cursor pagination over a (time, id) key: the one cursor codec of both services.

A cursor is URL-safe base64 (no padding) of a small JSON object; clients must treat it as opaque.
Anything that does not decode to exactly that shape is refused (`parse_cursor` raises
`InvalidCursor`, which each API answers with `invalid_cursor_problem()`: 400 `invalid-cursor`),
so a tampered cursor never reaches a query: its time must lie in the range every API instant
keeps to (`servicekit.rfc3339.INSTANT_MIN`..`INSTANT_MAX`; outside it the conversion to UTC can
overflow) and its id must be printable ASCII of at most `_MAX_ID_CHARS` (what ids are: a NUL or a
lone surrogate would fail in the driver, not here). Lists fetch `limit + 1` rows and call
`split_page`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from servicekit.http.problems import ProblemError
from servicekit.rfc3339 import RFC3339_PATTERN, instant_in_range

T = TypeVar("T")

LIMIT_MIN = 1
LIMIT_MAX = 100
LIMIT_DEFAULT = 50
# A cursor this long is not one of ours; refuse before decoding.
_MAX_CURSOR_CHARS = 512
# Ids are a prefix and a ULID (about 30 ASCII characters); path ids allow 64, so do cursors.
_MAX_ID_CHARS = 64


@dataclass(frozen=True)
class Cursor:
    created_at: datetime
    """The sort key's time (a schedule's created_at, a run's scheduled_for, ...)."""
    id: str

    @property
    def key(self) -> tuple[datetime, str]:
        return self.created_at, self.id


class InvalidCursor(ValueError):
    """Not a cursor this API returned."""


def encode_cursor(created_at: datetime, ident: str) -> str:
    raw = json.dumps({"t": created_at.isoformat(), "i": ident}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def invalid_cursor_problem() -> ProblemError:
    return ProblemError(
        400,
        "invalid-cursor",
        "cursor is not valid; pass back next_cursor exactly as received",
        extra={"field": "cursor"},
    )


def parse_cursor(cursor: str) -> Cursor:
    """Decode a cursor or raise `InvalidCursor`."""
    if not cursor or len(cursor) > _MAX_CURSOR_CHARS:
        raise InvalidCursor("empty or too long")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        obj = json.loads(raw)
        if not isinstance(obj, dict) or set(obj) != {"t", "i"}:
            raise ValueError("shape")
        created_at, ident = obj["t"], obj["i"]
        if not isinstance(created_at, str) or not isinstance(ident, str):
            raise ValueError("types")
        if not 0 < len(ident) <= _MAX_ID_CHARS or not (ident.isascii() and ident.isprintable()):
            raise ValueError("id")
        # fromisoformat alone reads "…00:00\x00Z" as midnight UTC: the text must be what we write.
        if not RFC3339_PATTERN.fullmatch(created_at):
            raise ValueError("time")
        when = instant_in_range(datetime.fromisoformat(created_at))
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidCursor(str(exc)) from None
    return Cursor(when, ident)


def decode_cursor(cursor: str) -> Cursor:
    """Decode a cursor or raise the 400 `ProblemError` (for API layers)."""
    try:
        return parse_cursor(cursor)
    except InvalidCursor:
        raise invalid_cursor_problem() from None


def split_page(
    rows: Sequence[T], limit: int, key: Callable[[T], tuple[datetime, str]]
) -> tuple[list[T], str | None]:
    """Given up to `limit + 1` rows, return the page and the cursor after its last row."""
    page = list(rows[:limit])
    if len(rows) > limit and page:
        created_at, ident = key(page[-1])
        return page, encode_cursor(created_at, ident)
    return page, None
