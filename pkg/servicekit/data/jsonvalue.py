"""`StorableJson`: a free-form JSON field (a schedule's `payload`) that stays valid JSON downstream.

Python's `json` reads `NaN`, `Infinity` and `-Infinity`, which RFC 8259 does not allow; stored and
sent on, they make the webhook body invalid JSON (`{"x":NaN}`), so they are refused wherever they
are nested. NUL (U+0000) is refused in strings and keys: PostgreSQL cannot store it in text or
jsonb. Other control characters are allowed here, unlike in `servicekit.text`: a payload is the
tenant's data, and JSON escapes them.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, JsonValue


def _path(parts: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")


def json_value_problem(value: Any) -> str | None:
    """Why `value` (already parsed JSON) cannot be stored and sent as JSON, or None."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:  # iterative: nesting depth is bounded by the parser, not by our stack
        where, item = stack.pop()
        at = f" at {_path(where)}" if where else ""
        if isinstance(item, float) and not math.isfinite(item):
            return f"NaN and Infinity are not JSON numbers (RFC 8259){at}"
        if isinstance(item, str) and "\x00" in item:
            return f"strings must not contain NUL (U+0000){at}"
        if isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in key:
                    return f"keys must not contain NUL (U+0000){at}"
                stack.append(((*where, key), child))
        elif isinstance(item, list):
            stack.extend(((*where, i), child) for i, child in enumerate(item))
    return None


def _storable(value: JsonValue) -> JsonValue:
    problem = json_value_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


StorableJson = Annotated[JsonValue, AfterValidator(_storable)]
