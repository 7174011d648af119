"""`Retry-After` parsing (RFC 9110 §10.2.3): delay-seconds or an HTTP-date."""

from __future__ import annotations

import email.utils
from datetime import UTC
from typing import Final

# A server may ask for anything; a day is the most we record (policy caps it further).
MAX_RETRY_AFTER_SECONDS: Final = 86_400.0


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait per `value`, relative to `now` (unix seconds); None when absent/invalid.

    A date in the past means "now" (0.0). Results are clamped to `MAX_RETRY_AFTER_SECONDS`.
    """
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > 64:
        return None
    if value.isascii() and value.isdigit():
        return min(float(int(value)), MAX_RETRY_AFTER_SECONDS)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        # RFC 9110 dates are GMT; parsedate_to_datetime yields naive for "-0000".
        when = when.replace(tzinfo=UTC)
    delay = when.timestamp() - now
    return min(max(delay, 0.0), MAX_RETRY_AFTER_SECONDS)
