"""Shared webhook delivery mechanism: signing, an SSRF-safe client, backoff (DESIGN.md §8).

Both services call exactly this API; delivery *policy and state* stay with each of them.

Signing (senders and receivers)::

    sign(secret, webhook_id, timestamp, body) -> "sha256=<lowercase hex>"
    signature_header(secrets, webhook_id, timestamp, body) -> "sha256=<a>, sha256=<b>"
    verify(secrets, headers, body, *, tolerance_seconds=300, now=None) -> bool
    generate_secret() -> "whsec_" + base64(32 random bytes)

  `X-Signature` is HMAC-SHA256 keyed on the secret's UTF-8 string over
  f"{X-Webhook-Id}.{X-Timestamp}." + raw body; the Standard Webhooks trio (`webhook-id`,
  `webhook-timestamp`, `webhook-signature: v1,<base64>`) signs the same message keyed on the
  base64-decoded bytes after `whsec_`. During a rotation both carry one entry per secret.

Receiver-side verification::

    import webhookdeliver as wd

    async def handle(request):                      # any framework: raw body + headers
        body = await request.read()
        if not wd.verify([SECRET], request.headers, body, tolerance_seconds=300):
            return web.Response(status=401)
        # X-Webhook-Id is stable across retries: use it to deduplicate.
        ...

Delivery::

    async with wd.Deliverer() as deliverer:        # one per process; pools keep-alive per host
        result = await deliverer.deliver(wd.Delivery(
            url="https://example.com/hook", body=b'{"a":1}', secrets=[secret],
            webhook_id="run_123", event_type="schedule.triggered", attempt=1,
            context_headers=wd.occurrence_headers(        # unsigned: X-Schedule-Id,
                schedule_id="sch_1", scheduled_for=at, trigger="schedule")))  # -For, X-Trigger
        result.ok, result.status_code, result.error_kind, result.retryable

  `Deliverer(*, allow_private_networks=False, allowed_ports=None, resolver=None,
  max_response_bytes=65536,
  user_agent=..., connector_limit=100, connector_limit_per_host=10,
  connect_timeout_seconds=5.0, keepalive_timeout_seconds=15.0, clock=time.time,
  ssl_context=None)`. `deliver()` never raises for delivery failures; `DeliveryResult` has
  `ok, status_code, error_kind, error_message, duration_ms, response_excerpt (first 1 KiB),
  retryable, retry_after_seconds, started_at (aware UTC), truncated`.
  `error_kind` is one of `ErrorKind`: dns, connect, tls, timeout, ssrf_blocked, http_status,
  invalid_url, protocol (the target answered, but not valid HTTP). A body over
  `max_response_bytes` is truncated, not failed (`truncated=True`). `retryable`:
  dns/connect/tls/timeout/protocol, 408, 429, 5xx. Redirects are never followed (a 3xx is an
  `http_status` failure, not retryable). `retry_after_seconds` parses seconds and HTTP-dates.

SSRF guard: only http/https; no userinfo; literal hosts in every numeric spelling are checked
without DNS; names are resolved by the guard (`resolver`, default the system's), *every* address
is checked against the deny table (`addresses.FORBIDDEN_IPV4_NETWORKS` / `..._IPV6_...`) and any
forbidden one refuses the delivery (`ssrf_blocked`, no connection attempted); the connection goes
to a vetted address (no second lookup) with SNI/Host = the original name and certificate
verification on; body reads and time are bounded. Ports: `allowed_ports` (None means
`DEFAULT_ALLOWED_PORTS`, 80 and 443 — what the egress NetworkPolicy opens — or any port with
`allow_private_networks`); another port is `ssrf_blocked` too.

Creation-time checks for the APIs (no DNS)::

    validate_target_url(url, *, allow_private_networks, allowed_ports=None)  # InvalidTargetURL
    parse_allowed_ports("80,443") -> frozenset[int]   # the WEBHOOK_ALLOWED_PORTS setting
    endpoint_key(url) -> "host:port"   # the per-endpoint concurrency unit
    # ForbiddenTargetURL (a subclass) marks SSRF refusals; .reason says why
    RESERVED_HEADERS / is_reserved_header(name)  # names tenants may not set (also webhook-*)
    is_forbidden_address(ip) -> bool

Attempt records (the one shape both services store; bounds applied here)::

    AttemptRecord.of(number, result) -> AttemptRecord(number, started_at, duration_ms,
        status_code, error_kind, error_message, response_excerpt, retry_after_seconds)
    MAX_ERROR_MESSAGE_CHARS (500, cut with "…"), MAX_EXCERPT_BYTES (1024 of UTF-8)
    bound_error_message(text), bound_excerpt(text), truncate_utf8(text, max_bytes)

Backoff::

    BackoffPolicy(initial_seconds, max_seconds, multiplier, max_attempts, max_elapsed_seconds)
        .next_delay(attempt, elapsed_seconds, retry_after=None, rng=None) -> float | None
"""

from webhookdeliver.addresses import forbidden_reason, is_forbidden_address
from webhookdeliver.attempts import (
    MAX_ERROR_MESSAGE_CHARS,
    MAX_EXCERPT_BYTES,
    AttemptRecord,
    bound_error_message,
    bound_excerpt,
    truncate_utf8,
)
from webhookdeliver.backoff import BackoffPolicy
from webhookdeliver.deliverer import (
    DEFAULT_USER_AGENT,
    Deliverer,
    Delivery,
    DeliveryResult,
    ErrorKind,
    Resolver,
    is_retryable_status,
    system_resolver,
)
from webhookdeliver.headers import (
    RESERVED_HEADERS,
    build_headers,
    completion_headers,
    is_reserved_header,
    occurrence_headers,
)
from webhookdeliver.retry_after import parse_retry_after
from webhookdeliver.signing import (
    generate_secret,
    sign,
    signature_header,
    standard_webhooks_signature,
    verify,
)
from webhookdeliver.targets import (
    DEFAULT_ALLOWED_PORTS,
    ForbiddenTargetURL,
    InvalidTargetURL,
    allowed_ports_setting,
    endpoint_key,
    parse_allowed_ports,
    validate_target_url,
)

__all__ = [
    "DEFAULT_ALLOWED_PORTS",
    "DEFAULT_USER_AGENT",
    "MAX_ERROR_MESSAGE_CHARS",
    "MAX_EXCERPT_BYTES",
    "RESERVED_HEADERS",
    "AttemptRecord",
    "BackoffPolicy",
    "Deliverer",
    "Delivery",
    "DeliveryResult",
    "ErrorKind",
    "ForbiddenTargetURL",
    "InvalidTargetURL",
    "Resolver",
    "allowed_ports_setting",
    "bound_error_message",
    "bound_excerpt",
    "build_headers",
    "completion_headers",
    "endpoint_key",
    "forbidden_reason",
    "generate_secret",
    "is_forbidden_address",
    "is_reserved_header",
    "is_retryable_status",
    "occurrence_headers",
    "parse_allowed_ports",
    "parse_retry_after",
    "sign",
    "signature_header",
    "standard_webhooks_signature",
    "system_resolver",
    "truncate_utf8",
    "validate_target_url",
    "verify",
]
