"""compact_json (orjson) writes the bytes the standard library writes for what reaches it, so
webhook bodies and outbox payloads keep their exact spelling."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from servicekit.json_encoding import compact_json


def stdlib(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


_scalars = st.none() | st.booleans() | st.integers() | st.text()
_values = st.recursive(
    _scalars, lambda kids: st.lists(kids) | st.dictionaries(st.text(), kids), max_leaves=25
)


@given(_values)
def test_same_bytes_as_the_standard_library_without_floats(value: object) -> None:
    # Integers of any size (orjson refuses beyond 64 bits: the fallback writes them), any text
    # (non-ASCII as is, control characters escaped, U+2028 as is).
    assert compact_json(value) == stdlib(value)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_read_back_as_the_same_number(x: float) -> None:
    assert json.loads(compact_json({"x": x})) == {"x": x}


def test_examples() -> None:
    assert compact_json({"é": '\x01\u2028"\\', "n": [1, None, True]}) == (
        '{"é":"\\u0001\u2028\\"\\\\","n":[1,null,true]}'.encode()
    )
    assert compact_json({"big": 2**70, 1: "k"}) == b'{"big":1180591620717411303424,"1":"k"}'
