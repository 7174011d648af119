"""Encryption at rest for webhook signing secrets: `servicekit.data.secretbox` (AES-256-GCM), the
box
notification uses too, behind the scheduler's interface (raw 32-byte keys, current first; the
row id as associated data).

Stored form: ``v1.<key id>.<urlsafe b64(nonce 12 bytes | ciphertext+tag)>``. The key
id is the first 8 hex chars of SHA-256 of the key, so `SCHEDULER_SECRET_KEY` can rotate: the
current key encrypts, every configured key (current and previous) can decrypt. The associated
data binds a ciphertext to its row (the schedule id), so a ciphertext copied to another row fails
to decrypt.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime

from servicekit.data import secretbox
from servicekit.data.secretbox import SecretBoxError, key_id

__all__ = ["NO_SECRET", "SecretBox", "SecretBoxError", "key_id"]

# The stored form of "no secret": an event schedule has no webhook to sign, and the column is NOT
# NULL (it predates event schedules); an empty string is never a ciphertext.
NO_SECRET = ""


class SecretBox:
    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("at least one key")
        if any(len(k) != secretbox.KEY_BYTES for k in keys):
            raise ValueError("AES-256 keys are 32 bytes")
        encoded = [base64.urlsafe_b64encode(k).decode("ascii") for k in keys]
        self._box = secretbox.SecretBox(encoded[0], encoded[1:])

    def encrypt(self, plaintext: str, *, associated: str) -> str:
        return self._box.encrypt(plaintext, associated.encode())

    def stored(self, secret: str | None, *, schedule_id: str) -> str:
        """The column value for a schedule's secret: its ciphertext, or NO_SECRET for None."""
        return NO_SECRET if secret is None else self.encrypt(secret, associated=schedule_id)

    def decrypt(self, stored: str, *, associated: str) -> str:
        return self._box.decrypt(stored, associated.encode())

    def signing_secrets(
        self,
        schedule_id: str,
        current: str,
        previous: str | None,
        previous_until: datetime | None,
        now: datetime,
    ) -> list[str]:
        """A schedule's signing secrets from its stored columns, decrypted
        (`servicekit.data.secretbox.in_force` says which); none for NO_SECRET."""
        if current == NO_SECRET:
            return []
        stored = secretbox.in_force(current, previous, previous_until, now)
        return [self.decrypt(s, associated=schedule_id) for s in stored]
