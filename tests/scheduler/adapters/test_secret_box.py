"""AES-GCM secret box: round trip, key rotation by key id, tamper and row binding detected."""

from __future__ import annotations

import pytest

from scheduler.adapters.secret_box import SecretBox, SecretBoxError, key_id

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
    assert rotated.needs_reencryption(stored)
    assert rotated.encrypt("s", associated="sch_1").split(".")[1] == key_id(NEW)
    with pytest.raises(SecretBoxError, match="no key"):
        SecretBox([NEW]).decrypt(stored, associated="sch_1")


def test_tamper_and_row_swap_fail() -> None:
    box = SecretBox([NEW])
    stored = box.encrypt("s", associated="sch_1")
    with pytest.raises(SecretBoxError):
        box.decrypt(stored, associated="sch_2")
    flipped = stored[:-2] + ("A" if stored[-2] != "A" else "B") + stored[-1]
    with pytest.raises(SecretBoxError):
        box.decrypt(flipped, associated="sch_1")


def test_rejects_wrong_key_size() -> None:
    with pytest.raises(ValueError):
        SecretBox([b"short"])
