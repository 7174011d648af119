"""`UNSET`: the default of every optional argument, so "not given" differs from `None`.

An argument left `UNSET` is not sent; `None` is sent as JSON `null` (in a PATCH: clear the field).
"""

from __future__ import annotations

import enum


class Unset(enum.Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET = Unset.UNSET
