"""`Rfc3339`: a date-time input (query filters, body fields) that must be RFC 3339 with an offset.

pydantic alone also reads `0.5` or `1700000000` as unix seconds and a naive `2026-03-08T07:00`
as local time; both are refused here, so `format: date-time` in the OpenAPI document is true.

Every instant an API takes (body fields, query filters, and the time inside a cursor) lies in
[`INSTANT_MIN`, `INSTANT_MAX`): Python parses `9999-12-31T23:59:59-01:00` or year 1, but the
conversion to UTC overflows, and instants near either end of the calendar leave no room for the
arithmetic every later step does (bounds, jitter, windows). Refused here, they are a 422 naming
the field (a 400 `invalid-cursor` in a cursor) instead of a 500 after the request reached code
that assumes them sane.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, PlainSerializer

from servicekit.data.timestamps import format_utc

# RFC 3339 §5.6 date-time: full-date "T" full-time, time-offset mandatory ("Z" or ±hh:mm).
# ASCII digits only (`\d` would take other scripts' digits); matched whole (`$` would let a
# trailing newline through).
RFC3339_PATTERN = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def _rfc3339_text(value: Any) -> Any:
    if isinstance(value, datetime):  # built in code, not parsed from a request
        if value.tzinfo is None:
            raise ValueError("must carry a UTC offset")
        return value
    if not isinstance(value, str) or not RFC3339_PATTERN.fullmatch(value):
        raise ValueError("must be an RFC 3339 date-time with an offset, e.g. 2026-03-08T07:00:00Z")
    return value


# The accepted range, UTC, inclusive-exclusive: from the Unix epoch (no run, schedule or delivery
# predates it) to the year 9000 (a millennium short of datetime.max, so no later step overflows).
INSTANT_MIN = datetime(1970, 1, 1, tzinfo=UTC)
INSTANT_MAX = datetime(9000, 1, 1, tzinfo=UTC)
_RANGE_TEXT = "must lie from 1970-01-01T00:00:00Z up to (not including) 9000-01-01T00:00:00Z"


def instant_in_range(value: datetime) -> datetime:
    """`value` in UTC, or `ValueError` when it is naive or outside [INSTANT_MIN, INSTANT_MAX)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("must carry a UTC offset")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-01:00, 0001-01-01T00:00:00+01:00
        raise ValueError(_RANGE_TEXT) from None
    if not INSTANT_MIN <= utc < INSTANT_MAX:
        raise ValueError(_RANGE_TEXT)
    return utc


def _in_range(value: datetime) -> datetime:
    instant_in_range(value)
    return value  # keep the caller's offset: some inputs are echoed in local time


Rfc3339 = Annotated[datetime, BeforeValidator(_rfc3339_text), AfterValidator(_in_range)]

# A date-time output: rendered in the one timestamp style (RFC 3339 UTC with `Z`).
UtcTimestamp = Annotated[datetime, PlainSerializer(format_utc, return_type=str)]
