"""Request headers of a webhook delivery (DESIGN.md §8) and which names tenants may not set."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

from servicekit.data.timestamps import format_utc
from servicekit.text import header_value_problem, is_token
from webhookdeliver.signing import signed_message, standard_signature_of, x_signature_of

# Ours (signature and metadata), framing (Host, Content-Length, Transfer-Encoding), hop-by-hop
# (RFC 9110 §7.6.1) and anything that changes how the body is read or where it goes.
RESERVED_HEADERS: Final[frozenset[str]] = frozenset(
    {
        "x-webhook-id",
        "x-timestamp",
        "x-signature",
        "x-event-type",
        "x-attempt",
        "x-schedule-id",
        "x-scheduled-for",
        "x-trigger",
        "x-run-complete-url",
        "x-run-complete-token",
        "user-agent",
        "content-type",
        "content-length",
        "content-encoding",
        "accept-encoding",
        "transfer-encoding",
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
)
RESERVED_HEADER_PREFIXES: Final = ("webhook-",)  # the Standard Webhooks namespace
MAX_TENANT_HEADERS: Final = 32
MAX_TENANT_HEADER_BYTES: Final = 8192  # names + values together
MAX_CONTEXT_VALUE_CHARS: Final = 256


@functools.lru_cache(maxsize=1024)
def is_reserved_header(name: str) -> bool:
    """True when a tenant may not set header `name` (any case). Remembered: the same few names
    are checked on every attempt."""
    lowered = name.strip().lower()
    return lowered in RESERVED_HEADERS or lowered.startswith(RESERVED_HEADER_PREFIXES)


def is_valid_header(name: str, value: str) -> bool:
    """An RFC 9110 field name (token) and value (visible ASCII, space, tab): the rules the APIs
    apply when headers are saved (servicekit.text), so nothing they accept is dropped here."""
    return _is_token_name(name) and _is_valid_value(value)


@functools.lru_cache(maxsize=1024)
def _is_token_name(name: str) -> bool:
    # Remembered like `is_reserved_header`: the same few names come with every attempt.
    return is_token(name)


def _is_valid_value(value: str) -> bool:
    # Printable ASCII is the common case and a C-speed test; tabs take the full check.
    return (value.isascii() and value.isprintable()) or header_value_problem(value) is None


def tenant_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The tenant's headers that may be sent: reserved and malformed ones are dropped.

    The APIs refuse such headers when they are saved; this is the last line at send time.
    Bounded by `MAX_TENANT_HEADERS` entries and `MAX_TENANT_HEADER_BYTES` in total.
    """
    kept: dict[str, str] = {}
    size = 0
    for name, value in headers.items():
        if len(kept) >= MAX_TENANT_HEADERS:
            break
        if is_reserved_header(name) or not is_valid_header(name, value):
            continue
        size += len(name) + len(value)
        if size > MAX_TENANT_HEADER_BYTES:
            break
        kept[name] = value
    return kept


def occurrence_headers(
    *, schedule_id: str, scheduled_for: datetime, trigger: str
) -> dict[str, str]:
    """A scheduler delivery's context (DESIGN.md §8): which schedule, which occurrence (RFC 3339
    UTC with `Z`; for a manual or replay run the instant it was requested) and what made the run
    (`schedule|manual|replay|backfill`). Not signed: the signature covers id, timestamp, body."""
    return {
        "X-Schedule-Id": schedule_id,
        "X-Scheduled-For": format_utc(scheduled_for),  # refuses a naive datetime
        "X-Trigger": trigger,
    }


def completion_headers(*, url: str, token: str) -> dict[str, str]:
    """A callback-mode delivery's completion call (DESIGN.md §7b): where to report the job's end
    and the bearer token for that run's current attempt. Unsigned like the occurrence headers;
    the token is a credential: never log it."""
    return {"X-Run-Complete-Url": url, "X-Run-Complete-Token": token}


def check_context_headers(context: Mapping[str, str]) -> None:
    """Context headers are ours: reserved names (so no tenant header can repeat one in another
    case) with valid values. A violation is a programming error."""
    for name, value in context.items():
        if not (
            _is_context_name(name)
            and _is_valid_value(value)
            and len(value) <= MAX_CONTEXT_VALUE_CHARS
        ):
            raise ValueError(f"context header {name!r} is not one of ours or its value is invalid")


@functools.lru_cache(maxsize=64)
def _is_context_name(name: str) -> bool:
    return is_reserved_header(name) and is_token(name)


def build_headers(
    *,
    secrets: Sequence[str],
    webhook_id: str,
    event_type: str,
    attempt: int,
    timestamp: int,
    body: bytes,
    user_agent: str,
    extra: Mapping[str, str] | None = None,
    context: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """All request headers of one attempt: the tenant's `extra`, then our unsigned `context`
    (e.g. `occurrence_headers`), then ours, written last so nothing overrides them."""
    if not secrets:
        raise ValueError("at least one secret is required")
    ts = str(timestamp)
    message = signed_message(webhook_id, timestamp, body)
    ours = {
        "Content-Type": "application/json",
        "User-Agent": user_agent,
        "Accept-Encoding": "identity",
        "X-Webhook-Id": webhook_id,
        "X-Timestamp": ts,
        "X-Signature": x_signature_of(secrets, message),
        "X-Event-Type": event_type,
        "X-Attempt": str(attempt),
        "webhook-id": webhook_id,
        "webhook-timestamp": ts,
        "webhook-signature": standard_signature_of(secrets, message),
    }
    if not extra:  # the common case: one dict, same order and precedence as below
        return {**context, **ours} if context else ours
    headers = tenant_headers(extra)
    headers.update(context or {})
    headers.update(ours)
    return headers
