"""Encryption at rest for webhook signing secrets: AES-256-GCM.

Stored form: ``v1.<key id>.<urlsafe b64(nonce 12 bytes | ciphertext+tag)>``. The key id is the
first 8 hex chars of SHA-256 of the key, so `SCHEDULER_SECRET_KEY` can rotate: the current key
encrypts, every configured key (current and previous) can decrypt. The associated data binds a
ciphertext to its row (the schedule id), so a ciphertext copied to another row fails to decrypt.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM


class SecretBoxError(Exception):
    """A stored secret cannot be decrypted (unknown key id, tampered, or wrong row)."""


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


class SecretBox:
    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("at least one key")
        for k in keys:
            if len(k) != 32:
                raise ValueError("AES-256 keys are 32 bytes")
        self._current = key_id(keys[0])
        self._keys = {key_id(k): AESGCM(k) for k in keys}

    @property
    def current_key_id(self) -> str:
        return self._current

    def encrypt(self, plaintext: str, *, associated: str) -> str:
        nonce = os.urandom(12)
        ct = self._keys[self._current].encrypt(nonce, plaintext.encode(), associated.encode())
        blob = base64.urlsafe_b64encode(nonce + ct).decode("ascii")
        return f"v1.{self._current}.{blob}"

    def decrypt(self, stored: str, *, associated: str) -> str:
        try:
            version, kid, blob = stored.split(".", 2)
        except ValueError:
            raise SecretBoxError("malformed ciphertext") from None
        if version != "v1":
            raise SecretBoxError(f"unknown format {version!r}")
        aead = self._keys.get(kid)
        if aead is None:
            raise SecretBoxError(f"no key with id {kid!r} is configured")
        raw = base64.urlsafe_b64decode(blob.encode("ascii"))
        try:
            return aead.decrypt(raw[:12], raw[12:], associated.encode()).decode()
        except InvalidTag:
            raise SecretBoxError("ciphertext does not authenticate") from None

    def needs_reencryption(self, stored: str) -> bool:
        """True when the row was written under an older key (for a background re-encrypt)."""
        return stored.split(".", 2)[1:2] != [self._current]
