"""compact_json (orjson) writes the bytes the standard library writes for what reaches it, so
webhook bodies and outbox payloads keep their exact spelling."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servicekit.data.json_encoding import compact_json, parse_json


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


def test_what_the_standard_library_refuses_stays_refused() -> None:
    # orjson would write a datetime or a dataclass; a JSON column must not store one silently.
    with pytest.raises(TypeError):
        compact_json({"at": datetime(2026, 1, 1, tzinfo=UTC)})
    with pytest.raises(TypeError):
        compact_json({"x": object()})


@given(_values)
def test_parse_reads_back_what_was_written(value: object) -> None:
    assert parse_json(compact_json(value)) == value
    assert parse_json(compact_json(value).decode()) == value


def test_parse_reads_what_only_the_standard_library_reads() -> None:
    assert parse_json('"\\ud800"') == "\ud800"  # a lone surrogate escape (SQLite text)
    assert parse_json('{"a": 1.5}') == {"a": 1.5}


def test_a_lone_surrogate_read_from_old_text_is_written_back_as_valid_json() -> None:
    # Before, the fallback's UTF-8 encode raised UnicodeEncodeError: the value parse_json had
    # just read could not be written again.
    value = parse_json('{"s": "\\ud800", "é": "ü"}')
    written = compact_json(value)
    assert written == b'{"s":"\\ud800","\\u00e9":"\\u00fc"}'  # ASCII only: escaped
    assert parse_json(written) == value
    assert json.loads(written) == value
    # Without a surrogate the fallback still writes non-ASCII as is.
    assert (
        compact_json({"big": 2**70, "é": "ü"}) == '{"big":1180591620717411303424,"é":"ü"}'.encode()
    )


@pytest.mark.parametrize("number", [-(2**63) - 1, 2**64, 2**64 - 1, 10**30, -(10**19)])
def test_integers_beyond_64_bits_read_back_exactly(number: int) -> None:
    # orjson reads these as floats: a tenant's payload would change without an error.
    assert parse_json(f'{{"n":{number}}}') == {"n": number}
    assert parse_json(f"[{number}]".encode()) == [number]
