"""`Rfc3339`: a date-time input (query filters, body fields) that must be RFC 3339 with an offset.

pydantic alone also reads `0.5` or `1700000000` as unix seconds and a naive `2026-03-08T07:00`
as local time; both are refused here, so `format: date-time` in the OpenAPI document is true.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

from servicekit.data.timestamps import format_utc

# RFC 3339 §5.6 date-time: full-date "T" full-time, time-offset mandatory ("Z" or ±hh:mm).
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")


def _rfc3339_text(value: Any) -> Any:
    if isinstance(value, datetime):  # built in code, not parsed from a request
        if value.tzinfo is None:
            raise ValueError("must carry a UTC offset")
        return value
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise ValueError("must be an RFC 3339 date-time with an offset, e.g. 2026-03-08T07:00:00Z")
    return value


Rfc3339 = Annotated[datetime, BeforeValidator(_rfc3339_text)]

# A date-time output: rendered in the one timestamp style (RFC 3339 UTC with `Z`).
UtcTimestamp = Annotated[datetime, PlainSerializer(format_utc, return_type=str)]
