"""The one id style and the one timestamp style of both services (servicekit.data.ids,
.timestamps)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from servicekit.data.ids import CROCKFORD, _encode, is_id, new_id, stable_id
from servicekit.data.timestamps import format_utc
from servicekit.rfc3339 import UtcTimestamp

ADDIS = timezone(timedelta(hours=3))


def test_any_offset_is_written_in_utc_with_z() -> None:
    assert format_utc(datetime(2026, 3, 8, 3, 0, tzinfo=ADDIS)) == "2026-03-08T00:00:00Z"
    assert format_utc(datetime(2026, 3, 8, 0, 0, 0, 250_000, tzinfo=UTC)) == (
        "2026-03-08T00:00:00.250000Z"
    )
    with pytest.raises(ValueError, match="offset"):
        format_utc(datetime(2026, 3, 8))


def test_the_pydantic_type_renders_the_same_in_python_and_json_modes() -> None:
    class Out(BaseModel):
        at: UtcTimestamp
        maybe: UtcTimestamp | None = None

    out = Out(at=datetime(2026, 3, 8, 3, 0, tzinfo=ADDIS))
    assert out.model_dump_json() == '{"at":"2026-03-08T00:00:00Z","maybe":null}'
    assert out.model_dump()["at"] == "2026-03-08T00:00:00Z"


def test_ids_sort_by_time_and_stable_ids_share_the_format() -> None:
    t = datetime(2026, 3, 8, tzinfo=UTC)
    earlier, later = new_id("sub", at=t), new_id("sub", at=t + timedelta(milliseconds=1))
    assert earlier < later
    assert is_id(earlier, "sub")
    assert not is_id(earlier, "sch")
    assert is_id(stable_id("dlv", "evt_1", "sub_1"), "dlv")
    assert not is_id("sub_" + "0" * 32)  # the old uuid-hex style is not this format (still valid
    # as an opaque id: the APIs only bound its length)


@given(st.integers(min_value=0, max_value=(1 << 130) - 1), st.integers(min_value=1, max_value=26))
def test_the_pair_table_encodes_like_one_character_at_a_time(value: int, length: int) -> None:
    expected = ""
    rest = value
    for _ in range(length):
        expected = CROCKFORD[rest & 31] + expected
        rest >>= 5
    assert _encode(value, length) == expected


@pytest.mark.parametrize("offset", [timedelta(0), timedelta(hours=3), timedelta(hours=-5)])
def test_format_utc_is_the_same_for_every_offset_of_one_instant(offset: timedelta) -> None:
    instant = datetime(2026, 3, 8, 7, 0, 0, 250, tzinfo=UTC)
    assert format_utc(instant.astimezone(timezone(offset))) == "2026-03-08T07:00:00.000250Z"


# A day inside datetime's range at each end: the conversion to UTC cannot overflow.
@given(st.datetimes(datetime(1, 1, 2), datetime(9999, 12, 30), timezones=st.timezones()))
def test_format_utc_writes_what_isoformat_in_utc_would(value: datetime) -> None:
    utc = value.astimezone(UTC)
    assert format_utc(value) == utc.isoformat().replace("+00:00", "Z")


def test_format_utc_takes_datetime_subclasses_too() -> None:
    class Frozen(datetime):  # what freezegun and pendulum hand out
        pass

    assert format_utc(Frozen(2026, 3, 8, 3, tzinfo=ADDIS)) == "2026-03-08T00:00:00Z"
