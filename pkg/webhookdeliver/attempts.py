"""One delivery attempt as both services store it, and the bounds on its text (DESIGN.md: the
stored response excerpt is at most 1 KiB).

    record = AttemptRecord.of(number, result)    # result: a DeliveryResult

The bounds are applied here, once, so a `delivery_attempts` row of either service holds the same
at most 500 characters of error and 1 KiB (UTF-8) of response whatever produced the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol

MAX_ERROR_MESSAGE_CHARS: Final = 500  # enough for a resolver or TLS message; bounded per row
MAX_EXCERPT_BYTES: Final = 1024  # of UTF-8 response text kept for the delivery log
_ELLIPSIS: Final = "…"


def truncate_utf8(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` of UTF-8, never inside a character."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", errors="ignore")


def storable_text(text: str) -> str:
    """`text` with each NUL replaced by U+FFFD (as undecodable bytes are): PostgreSQL's text
    cannot hold NUL, and one endpoint answering with a NUL byte must not fail the whole batch of
    completions it is written in."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def bound_error_message(message: str | None) -> str | None:
    """At most MAX_ERROR_MESSAGE_CHARS characters, the last one an ellipsis when cut, and no
    NUL; an empty message is None."""
    if not message:
        return None
    message = storable_text(message)
    if len(message) <= MAX_ERROR_MESSAGE_CHARS:
        return message
    return message[: MAX_ERROR_MESSAGE_CHARS - 1] + _ELLIPSIS


def bound_excerpt(excerpt: str | None) -> str | None:
    """At most MAX_EXCERPT_BYTES of UTF-8 and no NUL; an empty excerpt is None."""
    if not excerpt:
        return None
    return truncate_utf8(storable_text(excerpt), MAX_EXCERPT_BYTES)


class AttemptResult(Protocol):
    """What `AttemptRecord.of` reads: `DeliveryResult` has it."""

    @property
    def ok(self) -> bool: ...
    @property
    def status_code(self) -> int | None: ...
    @property
    def error_kind(self) -> str | None: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def duration_ms(self) -> float: ...
    @property
    def response_excerpt(self) -> str | None: ...
    @property
    def retry_after_seconds(self) -> float | None: ...
    @property
    def started_at(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt: `number` is 1-based; `error_kind` is None exactly when the attempt
    succeeded (a failed one without a kind is recorded as "error")."""

    number: int
    started_at: datetime
    duration_ms: int
    status_code: int | None
    error_kind: str | None
    error_message: str | None
    response_excerpt: str | None
    retry_after_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.number < 1:
            raise ValueError("attempt numbers start at 1")
        if self.duration_ms < 0:
            raise ValueError("duration_ms must be >= 0")
        if self.started_at.tzinfo is None:
            raise ValueError("started_at must be timezone-aware")

    @classmethod
    def of(cls, number: int, result: AttemptResult) -> AttemptRecord:
        kind = None if result.ok else str(result.error_kind or "error")
        return cls(
            number=number,
            started_at=result.started_at,
            duration_ms=max(round(result.duration_ms), 0),
            status_code=result.status_code,
            error_kind=kind,
            error_message=bound_error_message(result.error_message),
            response_excerpt=bound_excerpt(result.response_excerpt),
            retry_after_seconds=result.retry_after_seconds,
        )
