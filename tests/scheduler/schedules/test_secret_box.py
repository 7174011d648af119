"""AES-GCM secret box: round trip, key rotation by key id, tamper and row binding detected."""

from __future__ import annotations

import base64

import pytest

from scheduler.adapters.secret_box import SecretBox, SecretBoxError, key_id
from servicekit.data import secretbox

OLD, NEW = b"o" * 32, b"n" * 32


def test_round_trip_and_ciphertext_hides_plaintext() -> None:
    box = SecretBox([NEW])
    stored = box.encrypt("whsec_abc", associated="sch_1")
    assert "whsec_abc" not in stored
    assert stored.startswith(f"v1.{key_id(NEW)}.")
    assert box.decrypt(stored, associated="sch_1") == "whsec_abc"
    # A fresh nonce each time: equal secrets do not produce equal ciphertexts.
    assert box.encrypt("whsec_abc", associated="sch_1") != stored


def test_old_key_still_decrypts_after_rotation() -> None:
    stored = SecretBox([OLD]).encrypt("s", associated="sch_1")
    rotated = SecretBox([NEW, OLD])
    assert rotated.decrypt(stored, associated="sch_1") == "s"
    assert rotated.encrypt("s", associated="sch_1").split(".")[1] == key_id(NEW)
    with pytest.raises(SecretBoxError, match="key"):
        SecretBox([NEW]).decrypt(stored, associated="sch_1")


def test_tamper_and_row_swap_fail() -> None:
    box = SecretBox([NEW])
    stored = box.encrypt("s", associated="sch_1")
    with pytest.raises(SecretBoxError):
        box.decrypt(stored, associated="sch_2")
    # Flip one bit of the sealed bytes (editing a base64 character could touch padding bits only).
    version, kid, blob = stored.split(".")
    raw = bytearray(base64.urlsafe_b64decode(blob))
    raw[-1] ^= 1
    flipped = f"{version}.{kid}.{base64.urlsafe_b64encode(bytes(raw)).decode()}"
    with pytest.raises(SecretBoxError):
        box.decrypt(flipped, associated="sch_1")


def test_rejects_wrong_key_size() -> None:
    with pytest.raises(ValueError):
        SecretBox([b"short"])


def test_format_is_servicekits_both_ways() -> None:
    """The scheduler stores what servicekit's box (notification's) reads, and the reverse: one
    ciphertext format for both services, unchanged from before the move."""
    shared = secretbox.SecretBox(base64.urlsafe_b64encode(NEW).decode())
    ours = SecretBox([NEW])
    assert shared.decrypt(ours.encrypt("s", associated="sch_1"), b"sch_1") == "s"
    assert ours.decrypt(shared.encrypt("t", b"sch_1"), associated="sch_1") == "t"
