"""AES-256-GCM encryption of secrets at rest, with a key id in every token so keys can rotate.

Token: `v1.<key id>.<urlsafe b64(nonce 12 bytes || ciphertext+tag)>`. The key id is derived from
the key (first 8 hex chars of its SHA-256), so no separate id needs configuring: encrypt with the
primary key, decrypt with whichever configured key the token names. `aad` binds a ciphertext to
its row (e.g. the subscription id) so it cannot be swapped onto another.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from collections.abc import Iterable
from datetime import datetime

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_VERSION = "v1"
_NONCE_BYTES = 12
KEY_BYTES = 32


class SecretBoxError(Exception):
    """A key is malformed, or a token cannot be decrypted with the configured keys."""


def generate_key() -> str:
    """32 random bytes, URL-safe base64: the format of *_SECRET_KEY variables."""
    return base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def parse_key(encoded: str) -> bytes:
    try:
        key = base64.urlsafe_b64decode(encoded.strip() + "=" * (-len(encoded.strip()) % 4))
    except (ValueError, binascii.Error) as exc:
        raise SecretBoxError("key is not URL-safe base64") from exc
    if len(key) != KEY_BYTES:
        raise SecretBoxError(f"key must decode to {KEY_BYTES} bytes, got {len(key)}")
    return key


def in_force(
    current: str, previous: str | None, previous_until: datetime | None, now: datetime
) -> tuple[str, ...]:
    """The stored secrets a rotated row signs with at `now`: the current one, then the previous
    one while its grace period lasts (until `previous_until`, exclusive). Both services' rule."""
    if previous is not None and previous_until is not None and now < previous_until:
        return (current, previous)
    return (current,)


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


class SecretBox:
    def __init__(self, primary: str, previous: Iterable[str] = ()) -> None:
        primary_key = parse_key(primary)
        self._primary_id = key_id(primary_key)
        self._keys = {key_id(k): AESGCM(k) for k in (parse_key(p) for p in previous)}
        self._keys[self._primary_id] = AESGCM(primary_key)

    def encrypt(self, plaintext: str, aad: bytes = b"") -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._keys[self._primary_id].encrypt(nonce, plaintext.encode(), aad)
        payload = base64.urlsafe_b64encode(nonce + sealed).decode()
        return f"{_VERSION}.{self._primary_id}.{payload}"

    def decrypt(self, token: str, aad: bytes = b"") -> str:
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != _VERSION:
            raise SecretBoxError("not a secretbox token")
        aead = self._keys.get(parts[1])
        if aead is None:
            raise SecretBoxError(f"no configured key has id {parts[1]}")
        try:
            raw = base64.urlsafe_b64decode(parts[2])
            return aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], aad).decode()
        except (InvalidTag, ValueError, binascii.Error) as exc:
            raise SecretBoxError("token does not decrypt (tampered, or wrong key or aad)") from exc
