"""The webhook signature scheme (DESIGN.md §8), for senders and receivers.

Two signatures cover the same message `f"{webhook_id}.{timestamp}.".encode() + body`:

* `X-Signature: sha256=<hex>` — HMAC-SHA256 keyed on the secret's whole UTF-8 string; one entry
  per secret during a rotation, comma-separated.
* `webhook-signature: v1,<base64>` — Standard Webhooks, keyed on the base64-decoded bytes after
  `whsec_`; one space-separated entry per secret.

Signing the id means a captured request cannot be replayed under another id; signing the
timestamp lets receivers refuse stale replays (`verify`'s tolerance).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import secrets as _secrets
import time
from collections.abc import Mapping, Sequence
from typing import Final, Protocol, Self

SECRET_PREFIX: Final = "whsec_"
SECRET_BYTES: Final = 32
# Receivers parse attacker-controlled headers: bound what they will look at.
MAX_SIGNATURE_HEADER_LENGTH: Final = 4096
MAX_SIGNATURE_ENTRIES: Final = 16
MAX_SECRETS: Final = 16
# Secrets whose keyed HMAC states are remembered (`_keyed`), least recently used first out. A
# rotated-out secret stays until 1,024 others were used after it (the process already holds
# every current secret in its claims; this bounds how many old ones it can keep).
SECRET_KEY_CACHE_SIZE: Final = 1024


def generate_secret() -> str:
    """A new signing secret: `whsec_` + standard base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def signed_message(webhook_id: str, timestamp: int, body: bytes) -> bytes:
    """The bytes both signatures cover (`build_headers` builds them once for the two)."""
    return f"{webhook_id}.{timestamp}.".encode() + body


def _hex_digest(secret: str, message: bytes) -> str:
    return _digest(secret.encode("utf-8"), message).hex()


def _digest(key: bytes, message: bytes) -> bytes:
    # hmac.digest is OpenSSL's one-shot HMAC: the same bytes as hmac.new(...).digest() without
    # building an HMAC object per signature.
    return hmac.digest(key, message, "sha256")


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The `X-Signature` value for one secret: `sha256=<lowercase hex>`."""
    return "sha256=" + _hex_digest(secret, signed_message(webhook_id, timestamp, body))


def signature_header(secrets: Sequence[str], webhook_id: str, timestamp: int, body: bytes) -> str:
    """The `X-Signature` value for all current secrets, newest first: `sha256=<a>, sha256=<b>`."""
    if not secrets:
        raise ValueError("at least one secret is required")
    return x_signature_of(secrets, signed_message(webhook_id, timestamp, body))


def x_signature_of(secrets: Sequence[str], message: bytes) -> str:
    """`signature_header` of an already built signed message (non-empty `secrets`)."""
    if len(secrets) == 1:  # the common case, without a generator and a join
        return "sha256=" + _mac(_keyed(secrets[0])[0], message).hex()
    return ", ".join("sha256=" + _mac(_keyed(secret)[0], message).hex() for secret in secrets)


def standard_webhooks_key(secret: str) -> bytes:
    """The Standard Webhooks HMAC key: the bytes base64-encoded after `whsec_`.

    A secret that is not `whsec_` + valid base64 (not one we generated) keys on its UTF-8 bytes,
    which off-the-shelf libraries will not reproduce; `X-Signature` still works for it.
    """
    if secret.startswith(SECRET_PREFIX):
        try:
            # Like the reference libraries: tolerate missing padding.
            key = base64.b64decode(secret[len(SECRET_PREFIX) :] + "==")
        except (binascii.Error, ValueError):
            key = b""
        if key:
            return key
    return secret.encode("utf-8")


def standard_webhooks_signature(
    secrets: Sequence[str], webhook_id: str, timestamp: int, body: bytes
) -> str:
    """The `webhook-signature` value: `v1,<base64>` per secret, space-separated."""
    if not secrets:
        raise ValueError("at least one secret is required")
    return standard_signature_of(secrets, signed_message(webhook_id, timestamp, body))


def standard_signature_of(secrets: Sequence[str], message: bytes) -> str:
    """`standard_webhooks_signature` of an already built signed message (non-empty `secrets`)."""
    if len(secrets) == 1:
        return "v1," + base64.b64encode(_mac(_keyed(secrets[0])[1], message)).decode()
    return " ".join(
        "v1," + base64.b64encode(_mac(_keyed(secret)[1], message)).decode() for secret in secrets
    )


class _Mac(Protocol):
    """A keyed HMAC state (`hmac.HMAC`): copied per message, never updated."""

    def copy(self) -> Self: ...
    def update(self, msg: bytes, /) -> None: ...
    def digest(self) -> bytes: ...


def _new_state(key: bytes) -> _Mac:
    return hmac.new(key, digestmod="sha256")


@functools.lru_cache(maxsize=SECRET_KEY_CACHE_SIZE)
def _keyed(secret: str) -> tuple[_Mac, _Mac]:
    """`secret`'s HMAC-SHA256 states keyed for `X-Signature` and for Standard Webhooks. Copying
    a keyed state skips decoding the key and hashing it into the state, which cost about as
    much as the HMAC of a small body, per signature."""
    return _new_state(secret.encode("utf-8")), _new_state(standard_webhooks_key(secret))


def _mac(state: _Mac, message: bytes) -> bytes:
    """HMAC of `message` from a keyed state: the same bytes as `hmac.digest(key, message)`."""
    mac = state.copy()
    mac.update(message)
    return mac.digest()


def verify(
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_seconds: int = 300,
    now: float | None = None,
) -> bool:
    """True when `headers` carry a valid, fresh signature of `body` under any of `secrets`.

    Header names are matched case-insensitively. `X-Webhook-Id` / `X-Timestamp` /
    `X-Signature` are checked first, then the Standard Webhooks trio; either scheme suffices.
    The timestamp must be within `tolerance_seconds` of `now` (default: the system clock) in
    either direction. Digests are compared with `hmac.compare_digest`.
    """
    if not secrets or len(secrets) > MAX_SECRETS:
        return False
    lowered = {name.lower(): value for name, value in headers.items()}
    current = time.time() if now is None else now
    return _verify_x_signature(secrets, lowered, body, tolerance_seconds, current) or (
        _verify_standard(secrets, lowered, body, tolerance_seconds, current)
    )


def _fresh_timestamp(raw: str | None, tolerance_seconds: int, now: float) -> int | None:
    if raw is None:
        return None
    raw = raw.strip()
    # Digits only (no sign, no exponent) and short: int() on huge strings is slow.
    if not (0 < len(raw) <= 15 and raw.isascii() and raw.isdigit()):
        return None
    timestamp = int(raw)
    return timestamp if abs(now - timestamp) <= tolerance_seconds else None


def _entries(raw: str | None, separator: str | None) -> list[str] | None:
    if raw is None or len(raw) > MAX_SIGNATURE_HEADER_LENGTH:
        return None
    entries = [entry.strip() for entry in raw.split(separator) if entry.strip()]
    return entries[:MAX_SIGNATURE_ENTRIES]


def _verify_x_signature(
    secrets: Sequence[str], headers: Mapping[str, str], body: bytes, tolerance: int, now: float
) -> bool:
    webhook_id = headers.get("x-webhook-id")
    timestamp = _fresh_timestamp(headers.get("x-timestamp"), tolerance, now)
    entries = _entries(headers.get("x-signature"), ",")
    if webhook_id is None or timestamp is None or not entries:
        return False
    message = signed_message(webhook_id, timestamp, body)
    expected = [("sha256=" + _hex_digest(secret, message)).encode() for secret in secrets]
    found = False
    for entry in entries:
        candidate = entry.lower().encode("utf-8", "replace")
        for want in expected:
            # Keep comparing after a match so timing does not reveal which entry matched.
            found |= hmac.compare_digest(candidate, want)
    return found


def _verify_standard(
    secrets: Sequence[str], headers: Mapping[str, str], body: bytes, tolerance: int, now: float
) -> bool:
    webhook_id = headers.get("webhook-id")
    timestamp = _fresh_timestamp(headers.get("webhook-timestamp"), tolerance, now)
    entries = _entries(headers.get("webhook-signature"), None)
    if webhook_id is None or timestamp is None or not entries:
        return False
    message = signed_message(webhook_id, timestamp, body)
    expected = [
        base64.b64encode(_digest(standard_webhooks_key(secret), message)) for secret in secrets
    ]
    found = False
    for entry in entries:
        version, _, signature = entry.partition(",")
        if version != "v1":
            continue
        candidate = signature.encode("utf-8", "replace")
        for want in expected:
            found |= hmac.compare_digest(candidate, want)
    return found
