"""Parsing and validation of schedule expressions and time zones (DESIGN.md §7, "Syntax").

The grammar follows cronie's `crontab(5)`, strictly:

- exactly five fields, `minute hour day-of-month month day-of-week`, separated by spaces or tabs
  (leading and trailing spaces/tabs are ignored); six- and seven-field forms are refused;
- a field is a comma list of items `*`, `*/S`, `V`, `A-B`, `A-B/S`; no empty items;
- ranges: minute 0-59, hour 0-23, day-of-month 1-31, month 1-12, day-of-week 0-7 (0 and 7 are
  Sunday); three-letter month (`JAN`-`DEC`) and weekday (`SUN`-`SAT`) names, case-insensitive,
  also inside ranges; full names (`January`, `Monday`) are refused;
- `A-B` needs A <= B (no wrap-around: `5-1` and `FRI-MON` are refused), except that a
  day-of-week range ending in Sunday written `0` or `SUN` (`MON-SUN`, `1-0`) means A-7, as
  cronie's parser reads it;
- a step is an integer >= 1; a step larger than the span selects the start only;
- macros, alone and lowercase: `@yearly` `@annually` `@monthly` `@weekly` `@daily` `@midnight`
  `@hourly`; any other `@word` (`@reboot`, `@every`) is refused;
- an expression that can never match (`0 0 30 2 *`) is refused; the day-of-week OR rule can rescue
  one (`0 0 31 2 1` is every Monday in February).

Decisions where DESIGN.md leaves the choice to us (all refused, each with its own reason):

- `V/S` (a single value with a step): refused. Cronie reads `5/15` as a syntax error, while
  cronsim and croniter read it as `5-59/15`; refusing avoids a silent disagreement. Write `5-59/15`.
- `L`, `W`, `#`, `?` (Quartz extensions) and `H` (Jenkins hash): refused; cronie has none of them.

A zone is an IANA key that `zoneinfo` can load. Unknown keys, paths (absolute, `..`, `.`),
`Etc/GMT+15`, and the host-dependent or non-canonical entries `localtime`, `posixrules`,
`Factory`, `posix/...`, `right/...` are refused. An unknown key's error suggests the closest
known ones (`America/NewYork`, `america/new_york` -> `America/New_York`).

Every error is an `InvalidScheduleExpression` naming the field and the offending token; its
`str()` is one line, used verbatim by the API and the CLI.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

# A bound on input size: the longest sensible expression (every minute listed) is ~170 characters.
MAX_EXPRESSION_LENGTH = 1024
# IANA keys are at most a few dozen characters; the bound keeps error messages one short line.
MAX_TIMEZONE_LENGTH = 64

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

FIELD_NAMES = ("minute", "hour", "day_of_month", "month", "day_of_week")

MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
        start=1,
    )
}
WEEKDAY_NAMES = {
    name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))
}

# (low, high, names) per field; day-of-week accepts 7 as a second Sunday.
_FIELD_SPECS: dict[str, tuple[int, int, dict[str, int]]] = {
    "minute": (0, 59, {}),
    "hour": (0, 23, {}),
    "day_of_month": (1, 31, {}),
    "month": (1, 12, MONTH_NAMES),
    "day_of_week": (0, 7, WEEKDAY_NAMES),
}

# Extensions other cron dialects accept; named so the error tells the tenant what was recognised.
_EXTENSIONS = {
    "L": "'L' (last day) is not supported",
    "W": "'W' (nearest weekday) is not supported",
    "#": "'#' (nth weekday) is not supported",
    "?": "'?' (no specific value) is not supported; use *",
    "H": "'H' (hashed value) is not supported",
}

_ITEM = re.compile(r"(?P<start>[^-/]+)(?:-(?P<end>[^-/]+))?(?:/(?P<step>[^-/]*))?")
_NUMBER = re.compile(r"[0-9]{1,9}")
_NAME = re.compile(r"[A-Za-z]+")
_ZONE_KEY = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
# Suggestions for an unknown zone: at most this many, at least this similar (difflib's ratio;
# 0.8 still catches one or two wrong letters in a city name without proposing unrelated zones).
MAX_ZONE_SUGGESTIONS = 3
ZONE_SUGGESTION_CUTOFF = 0.8
# Spelling variants that do not change a key's meaning: case, `_` for a space, `-`.
_ZONE_NOISE = re.compile(r"[\s_\-]+")
_REFUSED_ZONES = frozenset({"localtime", "posixrules", "factory"})
_REFUSED_ZONE_PREFIXES = ("posix/", "right/")

# Days each month can have (February 29 in leap years): used to refuse impossible dates.
_MONTH_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class InvalidScheduleExpression(ValueError):
    """An expression or zone that cannot be scheduled; names the field and the offending token."""

    def __init__(self, field: str, token: str, reason: str, hint: str = "") -> None:
        self.field = field
        self.token = token
        self.reason = reason
        self.hint = hint
        super().__init__(f"{field}: {self.described}")

    @property
    def described(self) -> str:
        """The message without the field name, for callers that name the field themselves."""
        text = f"{self.reason} (token {self.token!r})"
        return f"{text}; {self.hint}" if self.hint else text


@dataclass(frozen=True, slots=True)
class ParsedExpression:
    """The five fields as value sets; days of week use 0 = Sunday .. 6 = Saturday."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    days_and: bool
    """True when the day-of-month or day-of-week field begins with `*`: both must match (AND).
    Otherwise either may match (OR, the Vixie rule)."""
    is_wildcard: bool
    """True when the minute or hour field begins with `*` (DESIGN.md §7): such a schedule fires at
    every matching real instant across DST changes; otherwise it is *fixed*."""


def parse_expression(expression: str) -> ParsedExpression:
    """Parse and validate a five-field expression or a macro; raises InvalidScheduleExpression."""
    if not isinstance(expression, str):
        raise InvalidScheduleExpression("expression", repr(expression), "must be a string")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise InvalidScheduleExpression(
            "expression",
            expression[:20] + "...",
            f"longer than {MAX_EXPRESSION_LENGTH} characters",
        )
    text = expression.strip(" \t")
    if not text:
        raise InvalidScheduleExpression("expression", expression, "empty expression")
    if text.startswith("@"):
        if text not in MACROS:
            if text.split()[0] in MACROS:
                reason = "a macro stands alone"
            else:
                reason = "unknown macro (supported: " + ", ".join(MACROS) + "; lowercase)"
            raise InvalidScheduleExpression("expression", text, reason)
        fields = MACROS[text].split(" ")
    else:
        fields = re.split(r"[ \t]+", text)
        if len(fields) != 5:
            raise InvalidScheduleExpression(
                "expression",
                text,
                f"expected 5 fields (minute hour day-of-month month day-of-week), "
                f"got {len(fields)}",
            )
    values = {
        name: _parse_field(name, field) for name, field in zip(FIELD_NAMES, fields, strict=True)
    }
    days_of_week = frozenset(v % 7 for v in values["day_of_week"])
    days_and = fields[2].startswith("*") or fields[4].startswith("*")
    parsed = ParsedExpression(
        expression=text,
        minutes=values["minute"],
        hours=values["hour"],
        days_of_month=values["day_of_month"],
        months=values["month"],
        days_of_week=days_of_week,
        days_and=days_and,
        is_wildcard=fields[0].startswith("*") or fields[1].startswith("*"),
    )
    if days_and and not any(
        day <= _MONTH_MAX_DAYS[month - 1] for month in parsed.months for day in parsed.days_of_month
    ):
        # Every weekday occurs in every month of some year, so only day-of-month x month can make
        # an AND-rule expression impossible; refusing here keeps the engine free of endless scans.
        raise InvalidScheduleExpression(
            "day_of_month", fields[2], "no selected day exists in any selected month"
        )
    return parsed


def _parse_field(name: str, field: str) -> frozenset[int]:
    low, high, names = _FIELD_SPECS[name]
    selected: set[int] = set()
    for item in field.split(","):
        if not item:
            raise InvalidScheduleExpression(name, field, "empty list item")
        selected.update(_parse_item(name, item, low, high, names))
    return frozenset(selected)


def _parse_item(name: str, item: str, low: int, high: int, names: dict[str, int]) -> range:
    _refuse_extensions(name, item, names)
    match = _ITEM.fullmatch(item)
    if match is None:
        raise InvalidScheduleExpression(name, item, "expected *, */S, V, A-B or A-B/S")
    start_text, end_text, step_text = match.group("start", "end", "step")
    step = 1
    if step_text is not None:
        if not _NUMBER.fullmatch(step_text):
            raise InvalidScheduleExpression(
                name, item, "step must be a whole number (at most 9 digits)"
            )
        step = int(step_text)
        if step < 1:
            raise InvalidScheduleExpression(name, item, "step must be at least 1")
    if start_text == "*":
        if end_text is not None:
            raise InvalidScheduleExpression(name, item, "* cannot start a range")
        return range(low, high + 1, step)
    start = _parse_value(name, item, start_text, low, high, names)
    if end_text is None:
        if step_text is not None:
            raise InvalidScheduleExpression(
                name, item, "a step needs a range or * (write A-B/S or */S)"
            )
        return range(start, start + 1)
    end = _parse_value(name, item, end_text, low, high, names)
    if name == "day_of_week" and end == 0 and start > 0:
        end = 7  # `MON-SUN`, `1-0`: Sunday as the week's end (cronie)
    if start > end:
        raise InvalidScheduleExpression(name, item, "range start is after its end (no wrap-around)")
    return range(start, end + 1, step)


def _refuse_extensions(name: str, item: str, names: dict[str, int]) -> None:
    """Name the other dialects' extensions explicitly, so the tenant learns why `5L` fails."""
    for symbol in "#?":
        if symbol in item:
            raise InvalidScheduleExpression(name, item, _EXTENSIONS[symbol])
    for run in re.findall(r"[A-Za-z]+", item):
        upper = run.upper()
        if upper not in names and upper in ("L", "W", "LW", "H"):
            raise InvalidScheduleExpression(name, item, _EXTENSIONS[upper[0]])


def _parse_value(
    name: str, item: str, text: str, low: int, high: int, names: dict[str, int]
) -> int:
    if _NUMBER.fullmatch(text):
        value = int(text)
    elif _NAME.fullmatch(text) and names:
        upper = text.upper()
        if upper not in names:
            hint = "JAN-DEC" if name == "month" else "SUN-SAT"
            raise InvalidScheduleExpression(
                name, item, f"unknown name {text!r} (use three-letter names {hint})"
            )
        value = names[upper]
    elif _NAME.fullmatch(text):
        raise InvalidScheduleExpression(name, item, "names are allowed only for month and weekday")
    else:
        raise InvalidScheduleExpression(name, item, f"{text!r} is not a number")
    if not low <= value <= high:
        raise InvalidScheduleExpression(name, item, f"value {value} out of range {low}-{high}")
    return value


def load_zone(timezone: str) -> ZoneInfo:
    """The zone for an IANA key; raises InvalidScheduleExpression (field `timezone`)."""
    if not isinstance(timezone, str):
        raise InvalidScheduleExpression("timezone", repr(timezone), "must be a string")
    if len(timezone) > MAX_TIMEZONE_LENGTH:
        raise InvalidScheduleExpression(
            "timezone", timezone[:20] + "...", f"longer than {MAX_TIMEZONE_LENGTH} characters"
        )
    if not _ZONE_KEY.fullmatch(timezone) or timezone.lower().startswith(_REFUSED_ZONE_PREFIXES):
        raise InvalidScheduleExpression(
            "timezone", timezone, "not an IANA time zone key (e.g. Europe/Paris)", _hint(timezone)
        )
    if timezone.lower() in _REFUSED_ZONES:
        raise InvalidScheduleExpression(
            "timezone", timezone, "not a canonical IANA time zone (e.g. Europe/Paris)"
        )
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidScheduleExpression(
            "timezone", timezone, "unknown time zone", _hint(timezone)
        ) from exc


def suggest_zones(text: str) -> list[str]:
    """The known zone keys closest to `text`, best first: the key that differs only in case,
    spaces, `_` or `-` (`America/NewYork`), else difflib's closest matches; [] if none is close."""
    exact, squashed = _zone_index()
    folded = text.strip().lower()
    if folded in exact:
        return [exact[folded]]
    same = squashed.get(_ZONE_NOISE.sub("", folded))
    if same:
        return list(same[:MAX_ZONE_SUGGESTIONS])
    close = difflib.get_close_matches(
        folded, list(exact), n=MAX_ZONE_SUGGESTIONS, cutoff=ZONE_SUGGESTION_CUTOFF
    )
    return [exact[c] for c in close]


def _hint(text: str) -> str:
    names = suggest_zones(text)
    return f"did you mean {' or '.join(names)}?" if names else ""


@functools.cache
def _zone_index() -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """(lowercase key -> key, key without case/`_`/`-`/spaces -> keys) over
    the keys load_zone accepts; built once (listing the zone database walks its directory)."""
    keys = sorted(
        k
        for k in available_timezones()
        if k.lower() not in _REFUSED_ZONES and not k.lower().startswith(_REFUSED_ZONE_PREFIXES)
    )
    exact = {k.lower(): k for k in keys}
    squashed: dict[str, list[str]] = {}
    for k in keys:
        squashed.setdefault(_ZONE_NOISE.sub("", k.lower()), []).append(k)
    return exact, {s: tuple(v) for s, v in squashed.items()}
