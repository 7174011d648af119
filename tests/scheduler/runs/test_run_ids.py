"""Ids: format, sort order by time, injectable randomness, deterministic stable ids."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servicekit.data.ids import is_id, new_id, stable_id

T0 = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)


def test_new_id_has_prefix_and_26_crockford_chars() -> None:
    rid = new_id("run", at=T0)
    assert rid.startswith("run_")
    assert len(rid) == 4 + 26
    assert is_id(rid, "run")
    assert not is_id(rid, "sch")


def test_injected_randomness_makes_ids_deterministic() -> None:
    a = new_id("run", at=T0, randbytes=lambda n: b"\x00" * n)
    b = new_id("run", at=T0, randbytes=lambda n: b"\x00" * n)
    c = new_id("run", at=T0, randbytes=lambda n: b"\x01" * n)
    assert a == b != c


@settings(max_examples=200)
@given(
    st.integers(min_value=0, max_value=10**11),
    st.integers(min_value=1, max_value=10**9),
    st.binary(min_size=10, max_size=10),
    st.binary(min_size=10, max_size=10),
)
def test_ids_sort_by_time_whatever_the_random_part(
    base_ms: int, delta_ms: int, r1: bytes, r2: bytes
) -> None:
    t1 = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=base_ms)
    t2 = t1 + timedelta(milliseconds=delta_ms)
    earlier = new_id("run", at=t1, randbytes=lambda n: r1)
    later = new_id("run", at=t2, randbytes=lambda n: r2)
    assert earlier < later


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        new_id("Run", at=T0)  # prefixes are lowercase
    with pytest.raises(ValueError):
        new_id("run", at=datetime(2026, 1, 1))  # naive
    with pytest.raises(ValueError):
        new_id("run", at=T0, randbytes=lambda n: b"x")  # too short


def test_stable_id_is_deterministic_and_separates_parts() -> None:
    assert stable_id("evt", "run_A", "x") == stable_id("evt", "run_A", "x")
    assert stable_id("evt", "ab", "c") != stable_id("evt", "a", "bc")
    assert is_id(stable_id("evt", "run_A"), "evt")
