"""Request headers of a webhook delivery (DESIGN.md §8) and which names tenants may not set."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

from servicekit.text import header_value_problem, is_token
from servicekit.timestamps import format_utc
from webhookdeliver.signing import signature_header, standard_webhooks_signature

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


@functools.lru_cache(maxsize=1024)
def is_reserved_header(name: str) -> bool:
    """True when a tenant may not set header `name` (any case). Remembered: the same few names
    are checked on every attempt."""
    lowered = name.strip().lower()
    return lowered in RESERVED_HEADERS or lowered.startswith(RESERVED_HEADER_PREFIXES)


def is_valid_header(name: str, value: str) -> bool:
    """An RFC 9110 field name (token) and value (visible ASCII, space, tab): the rules the APIs
    apply when headers are saved (servicekit.text), so nothing they accept is dropped here."""
    # Printable ASCII is the common case and a C-speed test; tabs take the full check.
    valid_value = (value.isascii() and value.isprintable()) or header_value_problem(value) is None
    return is_token(name) and valid_value


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


def check_context_headers(context: Mapping[str, str]) -> None:
    """Context headers are ours: reserved names (so no tenant header can repeat one in another
    case) with valid values. A violation is a programming error."""
    for name, value in context.items():
        if not is_reserved_header(name) or not is_valid_header(name, value) or len(value) > 256:
            raise ValueError(f"context header {name!r} is not one of ours or its value is invalid")


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
    headers = tenant_headers(extra or {})
    headers.update(context or {})
    headers.update(
        {
            "Content-Type": "application/json",
            "User-Agent": user_agent,
            "Accept-Encoding": "identity",
            "X-Webhook-Id": webhook_id,
            "X-Timestamp": str(timestamp),
            "X-Signature": signature_header(secrets, webhook_id, timestamp, body),
            "X-Event-Type": event_type,
            "X-Attempt": str(attempt),
            "webhook-id": webhook_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": standard_webhooks_signature(secrets, webhook_id, timestamp, body),
        }
    )
    return headers
