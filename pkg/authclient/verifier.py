"""Bearer JWT verification: one key per token, algorithms fixed by the key, claims checked.

Which key verifies a token, and with which single algorithm:
- `HS256` tokens: the shared `AUTH_HS256_KEY`, only if one is configured.
- `RS256` / `ES256` / `EdDSA` tokens: the JWKS key named by `kid`; the key's type alone decides
  the algorithm (RSA -> RS256, P-256 -> ES256, Ed25519 -> EdDSA) and the header must agree.
Anything else (`none`, HS384, PS256, ...) is refused. The header only selects; it never widens
what a key may verify, so an HS256 token "signed" with a published RSA key is refused.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import jwt

from authclient.errors import AuthError, JwksUnavailableError
from authclient.jwks import (
    ASYMMETRIC_ALGORITHMS,
    JwksCache,
    JwksFetch,
    file_fetch,
    url_fetch,
)
from authclient.principal import Principal
from authclient.settings import AuthSettings
from servicekit.text import forbidden_char

# Real tokens are well under 2 KiB; 8 KiB bounds parsing work and matches common header limits.
MAX_TOKEN_CHARS = 8 * 1024
MAX_TENANT_ID_CHARS = 200
MAX_SUBJECT_CHARS = 255
MAX_SCOPES = 100
MAX_SCOPE_CHARS = 100

HttpFetch = Callable[[str], Awaitable[bytes]]


class TokenVerifier:
    """Verifies bearer tokens against `AuthSettings`; build once per process and share.

    `clock` returns unix seconds (exp/nbf/iat checks and JWKS cache ages); `http_fetch(url)`
    replaces the aiohttp GET of `AUTH_JWKS_URL` (its result is still size-checked).
    """

    def __init__(
        self,
        settings: AuthSettings,
        *,
        clock: Callable[[], float] | None = None,
        http_fetch: HttpFetch | None = None,
    ) -> None:
        if not settings.configured():
            raise ValueError(
                "no token key configured: set AUTH_HS256_KEY, AUTH_JWKS_URL or AUTH_JWKS_FILE"
            )
        if settings.AUTH_JWKS_URL is not None and settings.AUTH_JWKS_FILE is not None:
            raise ValueError("set AUTH_JWKS_URL or AUTH_JWKS_FILE, not both")
        self._settings = settings
        self._clock = clock or time.time
        hs_key = settings.AUTH_HS256_KEY
        self._hs256_key = hs_key.get_secret_value().encode() if hs_key is not None else None
        self._jwks: JwksCache | None = None
        fetch = _jwks_fetch(settings, http_fetch)
        if fetch is not None:
            self._jwks = JwksCache(
                fetch,
                clock=self._clock,
                cache_seconds=settings.AUTH_JWKS_CACHE_SECONDS,
                min_refetch_seconds=settings.AUTH_JWKS_MIN_REFETCH_SECONDS,
            )

    @property
    def jwks(self) -> JwksCache | None:
        """The JWKS cache, when a JWKS source is configured (for metrics and tests)."""
        return self._jwks

    async def verify(self, token: str) -> Principal:
        """The principal a valid token names; raises AuthError for every refusal."""
        if not isinstance(token, str) or not token:
            raise AuthError("token is empty")
        if len(token) > MAX_TOKEN_CHARS:
            raise AuthError(f"token exceeds {MAX_TOKEN_CHARS} characters")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthError("token is malformed") from exc
        key, algorithm = await self._key_for(header)
        claims = self._decode(token, key, algorithm)
        self._check_times(claims)
        return _principal(claims)

    async def _key_for(self, header: dict[str, Any]) -> tuple[Any, str]:
        algorithm = header.get("alg")
        if algorithm == "HS256":
            if self._hs256_key is None:
                raise AuthError("algorithm HS256 is not accepted")
            return self._hs256_key, algorithm
        # A non-string `alg` (a list or an object is unhashable) is refused like an unknown one.
        if not isinstance(algorithm, str) or algorithm not in ASYMMETRIC_ALGORITHMS:
            raise AuthError("token algorithm is not accepted")
        if self._jwks is None:
            raise AuthError(f"algorithm {algorithm} is not accepted")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise AuthError("token has no kid")
        found = await self._jwks.get(kid)
        if found is None:
            raise AuthError("token kid is unknown")
        if found.algorithm != algorithm:
            raise AuthError("token algorithm does not match its key")
        return found.key, algorithm

    def _decode(self, token: str, key: Any, algorithm: str) -> dict[str, Any]:
        # Time claims are checked by _check_times with the injected clock, not PyJWT's.
        options: Any = {
            "verify_exp": False,
            "verify_nbf": False,
            "verify_iat": False,
            "require": ["exp", "sub", "aud", "iss"],
        }
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self._settings.AUTH_AUDIENCE,
                issuer=self._settings.AUTH_ISSUER,
                options=options,
            )
        except jwt.InvalidSignatureError as exc:
            raise AuthError("token signature is invalid") from exc
        except jwt.InvalidAudienceError as exc:
            raise AuthError("token audience is not accepted") from exc
        except jwt.InvalidIssuerError as exc:
            raise AuthError("token issuer is not accepted") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"token has no {exc.claim} claim") from exc
        except jwt.PyJWTError as exc:
            raise AuthError("token is invalid") from exc
        return claims

    def _check_times(self, claims: dict[str, Any]) -> None:
        now = self._clock()
        leeway = self._settings.AUTH_LEEWAY_SECONDS
        exp = _numeric_date(claims, "exp")
        if exp is None or exp <= now - leeway:
            raise AuthError("token has expired")
        nbf = _numeric_date(claims, "nbf")
        if nbf is not None and nbf > now + leeway:
            raise AuthError("token is not yet valid")
        iat = _numeric_date(claims, "iat")
        if iat is not None and iat > now + leeway:
            raise AuthError("token was issued in the future")


def _jwks_fetch(settings: AuthSettings, http_fetch: HttpFetch | None) -> JwksFetch | None:
    max_bytes = settings.AUTH_JWKS_MAX_BYTES
    if settings.AUTH_JWKS_FILE is not None:
        return file_fetch(settings.AUTH_JWKS_FILE, max_bytes=max_bytes)
    url = settings.AUTH_JWKS_URL
    if url is None:
        return None
    if http_fetch is None:
        timeout = settings.AUTH_JWKS_TIMEOUT_SECONDS
        return url_fetch(url, timeout_seconds=timeout, max_bytes=max_bytes)
    injected = http_fetch

    async def fetch() -> bytes:
        document = await injected(url)
        if len(document) > max_bytes:
            raise JwksUnavailableError(f"JWKS document exceeds {max_bytes} bytes")
        return document

    return fetch


def _numeric_date(claims: dict[str, Any], name: str) -> float | None:
    """RFC 7519 NumericDate: a JSON number (bool is not one, though Python says it is an int)."""
    if name not in claims:
        return None
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AuthError(f"token {name} claim is not a number")
    # Python's json accepts NaN and Infinity; NaN compares false both ways and would never expire.
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise AuthError(f"token {name} claim is out of range") from None
    if not math.isfinite(number):
        raise AuthError(f"token {name} claim is out of range")
    return number


def _bounded_string(claims: dict[str, Any], name: str, max_chars: int) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value.strip():
        raise AuthError(f"token has no {name} claim")
    if len(value) > max_chars:
        raise AuthError(f"token {name} claim exceeds {max_chars} characters")
    # A tenant id is a key in every query; PostgreSQL cannot hold NUL, and no id holds controls.
    if forbidden_char(value) is not None:
        raise AuthError(f"token {name} claim contains a control character")
    return value


def _principal(claims: dict[str, Any]) -> Principal:
    subject = _bounded_string(claims, "sub", MAX_SUBJECT_CHARS)
    tenant_id = _bounded_string(claims, "tenant_id", MAX_TENANT_ID_CHARS)
    raw_scope = claims.get("scope", "")
    if not isinstance(raw_scope, str):
        raise AuthError("token scope claim is not a string")
    if forbidden_char(raw_scope) is not None:
        raise AuthError("token scope claim contains a control character")
    scopes = raw_scope.split()
    if len(scopes) > MAX_SCOPES or any(len(scope) > MAX_SCOPE_CHARS for scope in scopes):
        raise AuthError("token scope claim is too large")
    return Principal(subject=subject, tenant_id=tenant_id, scopes=frozenset(scopes))
