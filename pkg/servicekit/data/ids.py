"""Identifiers of both services: `prefix_` + 26 Crockford base32 characters (ULID layout), e.g.
`run_01J9...`, `sch_…`, `sub_…`, `dlv_…`, `evt_…`, `ntf_…`. Pure (no I/O), so domains may use it.

A ULID is 48 bits of milliseconds since the Unix epoch followed by 80 random bits, so ids sort by
creation time as plain strings (the run list's cursor and index can rely on it). The time part only
orders ids; nothing reads meaning back out of it. Ids made within one millisecond are not ordered
among themselves.

The domain passes its own `now` (`at=`) so no clock is read there; randomness is injectable so
tests can make ids deterministic. `stable_id` derives an id from what it names (e.g. the event
"run X succeeded"), so a retried write produces the same id and consumers can deduplicate.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ID_BODY_LENGTH = 26
_TIME_BITS = 48
_RANDOM_BYTES = 10  # 80 bits: collisions within one millisecond are negligible
_PREFIX = re.compile(r"^[a-z][a-z0-9]{0,15}$")  # short, lowercase: "run", "sch", "evt", "att"
_ID = re.compile(r"^([a-z][a-z0-9]{0,15})_([0-9A-HJKMNP-TV-Z]{26})$")

RandBytes = Callable[[int], bytes]


# Every pair of characters, by the 10 bits they encode: an id body is 13 lookups, not 26
# shift-and-append steps (ids are made per run and per event on the hot path).
_PAIRS = tuple(a + b for a in CROCKFORD for b in CROCKFORD)


def _encode(value: int, length: int) -> str:
    """`value`'s low `length * 5` bits as Crockford base32, most significant first."""
    if length % 2:
        return _encode(value >> 5, length - 1) + CROCKFORD[value & 31]
    return "".join(_PAIRS[(value >> shift) & 1023] for shift in range(length * 5 - 10, -1, -10))


def _check_prefix(prefix: str) -> None:
    if not _PREFIX.match(prefix):
        raise ValueError(f"id prefix must be 1-16 lowercase letters/digits, got {prefix!r}")


def new_id(prefix: str, *, at: datetime | None = None, randbytes: RandBytes = os.urandom) -> str:
    """A new sortable id such as `run_01J9ZK3T1V6Q7W8X9Y0Z1A2B3C`.

    `at` (aware) sets the time part; when omitted the wall clock is read (for callers outside the
    domain that have no `now` at hand). `randbytes(n)` supplies the 80 random bits.
    """
    _check_prefix(prefix)
    if at is None:
        millis = time.time_ns() // 1_000_000
    else:
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError("`at` must be timezone-aware")
        # Integer arithmetic: a float timestamp * 1000 can round two close instants the same way.
        millis = (at - _EPOCH) // timedelta(milliseconds=1)
    if not 0 <= millis < 1 << _TIME_BITS:
        raise ValueError("`at` is outside the ULID time range")
    rand = randbytes(_RANDOM_BYTES)
    if len(rand) != _RANDOM_BYTES:
        raise ValueError(f"randbytes must return {_RANDOM_BYTES} bytes")
    value = (millis << 80) | int.from_bytes(rand, "big")
    return f"{prefix}_{_encode(value, ID_BODY_LENGTH)}"


def first_id_at(prefix: str, at: datetime) -> str:
    """The smallest id `new_id(prefix, at=at)` can make: every id made at `at` or later sorts
    at or after it (a lower bound for a range of ids by creation time)."""
    return new_id(prefix, at=at, randbytes=lambda n: bytes(n))


def stable_id(prefix: str, *parts: str) -> str:
    """A deterministic id in the same format, derived from `parts` (SHA-256, first 130 bits)."""
    _check_prefix(prefix)
    if not parts:
        raise ValueError("stable_id needs at least one part")
    # Length-prefix each part so ("ab", "c") and ("a", "bc") cannot collide.
    material = b"".join(len(p).to_bytes(4, "big") + p.encode() for p in parts)
    digest = int.from_bytes(hashlib.sha256(material).digest()[:17], "big") >> 6  # 130 bits
    return f"{prefix}_{_encode(digest, ID_BODY_LENGTH)}"


def is_id(value: str, prefix: str | None = None) -> bool:
    """True when `value` has the id format (and, if given, the prefix)."""
    m = _ID.match(value)
    if m is None:
        return False
    return prefix is None or m.group(1) == prefix
