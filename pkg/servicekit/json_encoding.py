"""Compact JSON bytes on the hot paths (webhook bodies, outbox event payloads): orjson.

orjson writes what `json.dumps(value, separators=(",", ":"), ensure_ascii=False)` writes for
the values that reach it here (objects with string keys, strings, 64-bit integers, floats,
booleans, null), except that a float's exponent has no leading zero (`1e-7`, not `1e-07`) —
the same number. What orjson refuses (integers
beyond 64 bits, non-string keys) falls back to the standard library. NaN and Infinity never
arrive: the APIs refuse them (`servicekit.jsonvalue`) and jsonb cannot hold them.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["compact_json"]


def compact_json(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON (no spaces, non-ASCII characters written as they are)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
