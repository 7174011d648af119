"""JSON on the hot paths (webhook bodies, outbox event payloads, JSON columns): orjson.

orjson writes what `json.dumps(value, separators=(",", ":"), ensure_ascii=False)` writes for
the values that reach it here (objects with string keys, strings, 64-bit integers, floats,
booleans, null), except that a float's exponent has no leading zero (`1e-7`, not `1e-07`) —
the same number. What orjson refuses (integers
beyond 64 bits, non-string keys) falls back to the standard library, and so do datetimes and
dataclasses, which the standard library refuses (orjson would write them); a value holding a
lone surrogate (orjson refuses it) is written ASCII-only, its non-ASCII characters escaped.
NaN and Infinity never arrive: the APIs refuse them (`servicekit.data.jsonvalue`) and jsonb cannot
hold them.
`parse_json` reads with orjson and falls back to the standard library for what orjson refuses
and it reads (lone surrogate escapes, NaN in text written before the APIs refused it), and for
text holding a run of 19 or more digits: orjson reads an integer beyond 64 bits as a float, which
would change a tenant's number without an error.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["compact_json", "parse_json"]
# Every integer orjson reads exactly has at most 19 digits, and one beyond 64 bits has at least 19.
_LONG_DIGITS_BYTES = re.compile(rb"[0-9]{19}")
_LONG_DIGITS_TEXT = re.compile(r"[0-9]{19}")
_STRICT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def compact_json(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON (no spaces, non-ASCII characters written as they are)."""
    try:
        return orjson.dumps(value, option=_STRICT)
    except orjson.JSONEncodeError:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        # A lone surrogate (parse_json reads `"\ud800"` from old text) has no UTF-8: escaped,
        # as the text it came from was, the JSON stays valid and reads back the same.
        return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode()


def parse_json(text: str | bytes) -> Any:
    """`json.loads(text)`, faster."""
    long_digits = _LONG_DIGITS_BYTES if isinstance(text, bytes) else _LONG_DIGITS_TEXT
    if long_digits.search(text) is not None:  # type: ignore[arg-type]
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
