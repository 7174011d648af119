"""Minting HS256 tokens for development and tests (`scheduler token`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

import jwt

from authclient.settings import DEFAULT_AUDIENCE, DEFAULT_ISSUER, MIN_HS256_KEY_CHARS

# A dev token should not outlive a working week by much; a year is the hard ceiling.
MAX_TTL_SECONDS = 366 * 24 * 3600


def mint_token(
    key: str,
    *,
    tenant_id: str,
    subject: str = "dev",
    scopes: Iterable[str],
    ttl_seconds: int = 3600,
    audience: str = DEFAULT_AUDIENCE,
    issuer: str = DEFAULT_ISSUER,
    now: float | None = None,
) -> str:
    """An HS256 token that a TokenVerifier with the same key, audience and issuer accepts."""
    if len(key) < MIN_HS256_KEY_CHARS:
        raise ValueError(f"HS256 key must be at least {MIN_HS256_KEY_CHARS} characters")
    if not tenant_id.strip() or not subject.strip():
        raise ValueError("tenant_id and subject must be non-empty")
    if not 1 <= ttl_seconds <= MAX_TTL_SECONDS:
        raise ValueError(f"ttl_seconds must be between 1 and {MAX_TTL_SECONDS}")
    scope_list = list(dict.fromkeys(scopes))  # dedupe, keep the caller's order
    if any(not scope or any(ch.isspace() for ch in scope) for scope in scope_list):
        raise ValueError("a scope must be non-empty and contain no whitespace")
    issued_at = int(time.time() if now is None else now)
    claims = {
        "iss": issuer,
        "aud": audience,
        "sub": subject,
        "tenant_id": tenant_id,
        "scope": " ".join(scope_list),
        "iat": issued_at,
        "nbf": issued_at,
        "exp": issued_at + ttl_seconds,
        "jti": uuid.uuid4().hex,
    }
    return jwt.encode(claims, key, algorithm="HS256")
