"""Test-only stand-in for scheduler.domain.occurrences/expression, used ONLY while the real engine
has not landed (conftest installs it when the import fails). Backed by cronsim; no DST rules."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError


class InvalidScheduleExpression(ValueError):
    def __init__(self, field: str, token: str, reason: str) -> None:
        super().__init__(f"{field}: {reason} (token {token!r})")
        self.field, self.token, self.reason = field, token, reason


class Recurrence:
    def __init__(self, expression: str, timezone: str) -> None:
        self.expression, self.timezone = expression, timezone
        self.zone = ZoneInfo(timezone)
        self.is_wildcard = expression.split()[0].startswith("*")

    @classmethod
    def parse(cls, expression: str, timezone: str) -> Recurrence:
        try:
            zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidScheduleExpression("timezone", timezone, "unknown time zone") from None
        if len(expression.split()) != 5:
            raise InvalidScheduleExpression("expression", expression, "needs 5 fields")
        try:
            CronSim(expression, datetime(2000, 1, 1, tzinfo=zone))
        except (CronSimError, ValueError):
            raise InvalidScheduleExpression("expression", expression, "invalid") from None
        return cls(expression, timezone)

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        return iter(CronSim(self.expression, after.astimezone(self.zone)))

    def next_after(self, after: datetime) -> datetime | None:
        return next(self.iter_after(after), None)

    def min_interval_seconds(self) -> int:
        return 60 if self.is_wildcard else 3600


def format_occurrence(dt: datetime) -> str:
    return dt.isoformat(timespec="seconds")


def install() -> None:
    exp = types.ModuleType("scheduler.domain.expression")
    exp.InvalidScheduleExpression = InvalidScheduleExpression  # type: ignore[attr-defined]
    occ = types.ModuleType("scheduler.domain.occurrences")
    occ.Recurrence = Recurrence  # type: ignore[attr-defined]
    occ.format_occurrence = format_occurrence  # type: ignore[attr-defined]
    sys.modules.setdefault("scheduler.domain.expression", exp)
    sys.modules.setdefault("scheduler.domain.occurrences", occ)
