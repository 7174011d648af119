"""JWKS key source: fetch, bound, parse, cache, and refetch on rotation without kid-spam.

Keys come from a file (`AUTH_JWKS_FILE`, re-read like a URL so that rotation on disk works) or a
URL (`AUTH_JWKS_URL`, aiohttp GET). The loaded set is reused for `cache_seconds`. A token whose
`kid` is not in the set triggers one refetch, but at most once per `min_refetch_seconds`: an
attacker sending tokens with random kids costs the identity provider one request per interval.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from authclient.errors import JwksUnavailableError

log = logging.getLogger(__name__)

JwksFetch = Callable[[], Awaitable[bytes]]

# A JWKS holds the current key and one or two being rotated in or out; 50 is generous.
MAX_KEYS = 50
# NIST SP 800-131A: RSA moduli below 2048 bits are no longer acceptable for signatures.
MIN_RSA_BITS = 2048
MAX_KID_CHARS = 256

# The only asymmetric algorithm each key type may verify. The token header never widens this.
_ALGORITHM_BY_KEY_TYPE: Mapping[tuple[str, str | None], str] = {
    ("RSA", None): "RS256",
    ("EC", "P-256"): "ES256",
    ("OKP", "Ed25519"): "EdDSA",
}
ASYMMETRIC_ALGORITHMS = frozenset(_ALGORITHM_BY_KEY_TYPE.values())


@dataclass(frozen=True)
class VerificationKey:
    """One usable public key from a JWKS and the single algorithm it verifies."""

    kid: str
    algorithm: str
    key: Any  # a cryptography public key object, as PyJWT expects


def parse_jwks(document: bytes) -> dict[str, VerificationKey]:
    """Parse a JWKS document into kid -> key, skipping keys we must not or cannot use.

    Skipped: symmetric (`oct`) keys (verifying HS256 with a published key is the algorithm
    confusion attack), keys carrying private material, `use` other than `sig`, an `alg` that
    disagrees with the key type, unsupported curves, short RSA moduli, and keys without a kid.
    """
    try:
        data = json.loads(document)
    except (ValueError, UnicodeDecodeError) as exc:
        raise JwksUnavailableError("JWKS document is not valid JSON") from exc
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise JwksUnavailableError("JWKS document has no keys array")
    entries: list[Any] = data["keys"]
    if len(entries) > MAX_KEYS:
        raise JwksUnavailableError(f"JWKS document has more than {MAX_KEYS} keys")
    keys: dict[str, VerificationKey] = {}
    for entry in entries:
        parsed = _parse_key(entry)
        if parsed is not None:
            keys[parsed.kid] = parsed
    return keys


def _parse_key(entry: Any) -> VerificationKey | None:
    if not isinstance(entry, dict):
        return None
    kid, kty, crv = entry.get("kid"), entry.get("kty"), entry.get("crv")
    if not isinstance(kid, str) or not kid or len(kid) > MAX_KID_CHARS:
        return None
    if "d" in entry or entry.get("use", "sig") != "sig":
        return None
    if not isinstance(kty, str) or not (crv is None or isinstance(crv, str)):
        return None
    algorithm = _ALGORITHM_BY_KEY_TYPE.get((kty, None if kty == "RSA" else crv))
    if algorithm is None or entry.get("alg", algorithm) != algorithm:
        return None
    try:
        key = jwt.PyJWK(entry, algorithm=algorithm).key
    except (jwt.PyJWTError, ValueError, TypeError):
        log.warning("jwks.key_skipped", extra={"kid": kid, "reason": "unparseable"})
        return None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        log.warning("jwks.key_skipped", extra={"kid": kid, "reason": "rsa_too_short"})
        return None
    return VerificationKey(kid=kid, algorithm=algorithm, key=key)


def file_fetch(path: Path, *, max_bytes: int) -> JwksFetch:
    """Read the JWKS from a file, refusing one larger than `max_bytes`."""

    def read() -> bytes:
        with path.open("rb") as handle:
            document = handle.read(max_bytes + 1)
        if len(document) > max_bytes:
            raise JwksUnavailableError(f"JWKS document exceeds {max_bytes} bytes")
        return document

    async def fetch() -> bytes:
        try:
            return await asyncio.to_thread(read)
        except OSError as exc:
            raise JwksUnavailableError("JWKS file cannot be read") from exc

    return fetch


def url_fetch(url: str, *, timeout_seconds: float, max_bytes: int) -> JwksFetch:
    """GET the JWKS over HTTP(S) with a total timeout, a 200 requirement and a size bound.

    A session per fetch: fetches are rare (cache TTL, rate-limited refetch), so a long-lived
    session would only add a lifecycle to manage.
    """

    async def fetch() -> bytes:
        timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(url, allow_redirects=False) as response,
            ):
                if response.status != 200:
                    raise JwksUnavailableError(f"JWKS endpoint answered {response.status}")
                if (response.content_length or 0) > max_bytes:
                    raise JwksUnavailableError(f"JWKS document exceeds {max_bytes} bytes")
                document = bytearray()
                # read(n) returns what has arrived, not n bytes: loop until EOF or over limit.
                while chunk := await response.content.read(max_bytes + 1 - len(document)):
                    document += chunk
                    if len(document) > max_bytes:
                        raise JwksUnavailableError(f"JWKS document exceeds {max_bytes} bytes")
                return bytes(document)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise JwksUnavailableError("JWKS endpoint unreachable") from exc

    return fetch


class JwksCache:
    """Cached kid -> key map over a fetch function; safe for concurrent callers.

    On a failed refresh the previous keys keep serving (an identity provider outage must not
    log everyone out); the failure still counts as an attempt for the refetch rate limit.
    """

    def __init__(
        self,
        fetch: JwksFetch,
        *,
        clock: Callable[[], float],
        cache_seconds: float,
        min_refetch_seconds: float,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._cache_seconds = cache_seconds
        self._min_refetch_seconds = min_refetch_seconds
        self._keys: dict[str, VerificationKey] | None = None
        self._loaded_at = 0.0
        self._attempted_at: float | None = None
        self._lock = asyncio.Lock()
        self.fetch_count = 0  # observable for tests and metrics

    async def get(self, kid: str) -> VerificationKey | None:
        """The key for `kid`, refreshing when stale or (rate-limited) when the kid is unknown."""
        now = self._clock()
        if self._keys is None or now - self._loaded_at >= self._cache_seconds:
            await self._refresh(stale_ok=self._keys is not None, unknown_kid=False)
        elif kid not in self._keys:
            await self._refresh(stale_ok=True, unknown_kid=True)
        assert self._keys is not None
        return self._keys.get(kid)

    async def _refresh(self, *, stale_ok: bool, unknown_kid: bool) -> None:
        async with self._lock:
            now = self._clock()
            fresh = self._keys is not None and now - self._loaded_at < self._cache_seconds
            if fresh and not unknown_kid:
                return  # another caller refreshed while we waited for the lock
            if self._attempted_at is not None and (
                now - self._attempted_at < self._min_refetch_seconds
            ):
                if self._keys is None:
                    raise JwksUnavailableError("JWKS unavailable, retrying later")
                return  # rate limit: serve what we have
            self._attempted_at = now
            self.fetch_count += 1
            try:
                keys = parse_jwks(await self._fetch())
            except JwksUnavailableError as exc:
                log.warning("jwks.refresh_failed", extra={"reason": exc.description})
                if not stale_ok:
                    raise
                return
            self._keys = keys
            self._loaded_at = now
