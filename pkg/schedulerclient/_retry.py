"""When to retry a call, and how long to wait first: pure functions, no clock of their own.

A call is retried only when repeating it cannot do the work twice: GET, PUT, DELETE, HEAD,
OPTIONS, and a POST that carries an `Idempotency-Key` (the client sends one on create). It is
retried on 429 and 503, waiting what `Retry-After` says (seconds or an HTTP date) or, without
one, an exponential backoff; and on a connection failure. Bounded twice: at most `max_retries`
retries, and at most `max_wait_seconds` of waiting in all; a `Retry-After` longer than what is
left of that budget ends the retries at once (the caller gets the 429/503 as an `ApiError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

RETRY_STATUSES = frozenset({429, 503})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
DEFAULT_MAX_RETRIES = 2  # three attempts in all
DEFAULT_MAX_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = DEFAULT_MAX_RETRIES
    max_wait_seconds: float = DEFAULT_MAX_WAIT_SECONDS
    backoff_initial_seconds: float = 0.5
    backoff_max_seconds: float = 8.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.max_wait_seconds < 0:
            raise ValueError("max_retries and max_wait_seconds must be >= 0")

    def delay(self, retries_done: int, waited: float, retry_after: float | None) -> float | None:
        """Seconds to wait before the next attempt, or None: give up and report the last answer.

        `retries_done` counts the retries already made, `waited` the seconds already waited.
        """
        if retries_done >= self.max_retries:
            return None
        if retry_after is None:
            wanted = min(self.backoff_initial_seconds * 2.0**retries_done, self.backoff_max_seconds)
        else:
            wanted = retry_after
        if waited + wanted > self.max_wait_seconds:
            return None
        return wanted


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """`Retry-After` as seconds from now: delta-seconds or an HTTP date (RFC 9110 §10.2.3).

    None when absent or unreadable; a date in the past is 0.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return max(seconds, 0.0)


def may_retry_status(status: int, retryable: bool) -> bool:
    return retryable and status in RETRY_STATUSES


def may_retry_exception(exc: httpx.TransportError, retryable: bool) -> bool:
    """A refused connection never reached the server: any call may be repeated. Any other
    failure (a reset, a read timeout) may have been processed: only a retryable call is."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return True
    return retryable and isinstance(
        exc, httpx.NetworkError | httpx.TimeoutException | httpx.RemoteProtocolError
    )
