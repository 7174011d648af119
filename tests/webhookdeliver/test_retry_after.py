"""Retry-After in both RFC 9110 forms, relative to an injected clock."""

from __future__ import annotations

import pytest

from webhookdeliver import parse_retry_after
from webhookdeliver.retry_after import MAX_RETRY_AFTER_SECONDS

NOW = 1_445_412_480.0  # Wed, 21 Oct 2015 07:28:00 GMT


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
        ("Wed, 21 Oct 2015 07:29:30 GMT", 90.0),
        ("Wed, 21 Oct 2015 07:00:00 GMT", 0.0),
        ("Wednesday, 21-Oct-15 07:28:10 GMT", 10.0),
        ("Wed Oct 21 07:28:20 2015", 20.0),
        ("99999999", MAX_RETRY_AFTER_SECONDS),
        (None, None),
        ("", None),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("x" * 100, None),
    ],
)
def test_parse(value, expected):
    assert parse_retry_after(value, now=NOW) == expected
