"""Syntax and validation (DESIGN.md §7 "Syntax"): what is accepted means what, what is refused
names the field and the token."""

from __future__ import annotations

import pytest

from scheduler.domain.expression import (
    MACROS,
    InvalidScheduleExpression,
    load_zone,
    parse_expression,
)

ALL_MINUTES = frozenset(range(60))
ALL_WEEKDAYS = frozenset(range(7))


@pytest.mark.parametrize(
    ("expression", "field", "expected"),
    [
        ("*/15 * * * *", "minutes", {0, 15, 30, 45}),
        ("0-10/4 * * * *", "minutes", {0, 4, 8}),
        ("5,7,9-11 * * * *", "minutes", {5, 7, 9, 10, 11}),
        ("*/100 * * * *", "minutes", {0}),  # a step larger than the span selects the start
        ("50-59/20 * * * *", "minutes", {50}),
        ("07 * * * *", "minutes", {7}),  # leading zero, as cronie reads it
        ("0 0-23/6 * * *", "hours", {0, 6, 12, 18}),
        ("0 0 * JAN,jul-Sep *", "months", {1, 7, 8, 9}),
        ("0 0 * * MON-FRI", "days_of_week", {1, 2, 3, 4, 5}),
        ("0 0 * * sun", "days_of_week", {0}),
        ("0 0 * * 7", "days_of_week", {0}),  # 7 is Sunday too
        ("0 0 * * 5-7", "days_of_week", {5, 6, 0}),
        ("0 0 * * */2", "days_of_week", {0, 2, 4, 6}),
        ("0 0 * * 0-7", "days_of_week", ALL_WEEKDAYS),
        ("0 0 * * MON-SUN", "days_of_week", ALL_WEEKDAYS),  # a range ending in Sunday: A-7
        ("0 0 * * 1-0", "days_of_week", ALL_WEEKDAYS),
        ("0 0 * * sat-sun", "days_of_week", {6, 0}),
        ("0 0 * * 5-0/2", "days_of_week", {5, 0}),
        ("0 0 * * 0-0", "days_of_week", {0}),
        ("0 0 1-31/10 * *", "days_of_month", {1, 11, 21, 31}),
    ],
)
def test_fields_select_the_documented_values(
    expression: str, field: str, expected: set[int]
) -> None:
    assert getattr(parse_expression(expression), field) == frozenset(expected)


@pytest.mark.parametrize(
    ("expression", "days_and"),
    [
        ("0 0 * * 1", True),  # day-of-month begins with *: AND
        ("0 0 1 * *", True),
        ("0 0 */2 * 1", True),  # `*/2` begins with *: still AND (cronie DOM_STAR)
        ("0 0 1 * */2", True),
        ("0 0 1 * 1", False),  # neither begins with *: OR (Vixie)
        ("0 0 1-31 * 1", False),  # `1-31` is every day but does not begin with *: OR
    ],
)
def test_day_rule_is_keyed_on_a_leading_star(expression: str, days_and: bool) -> None:
    assert parse_expression(expression).days_and is days_and


@pytest.mark.parametrize(
    ("expression", "wildcard"),
    [
        ("*/15 * * * *", True),
        ("0 * * * *", True),
        ("*/15 2 * * *", True),
        ("@hourly", True),
        ("30 2 * * *", False),
        ("0 1-5 * * *", False),
        ("0 0-23/2 * * *", False),
        ("0-59 2 * * *", False),  # every minute of 02:xx, but written without a star: fixed
        ("@daily", False),
    ],
)
def test_wildcard_is_keyed_on_minute_and_hour_fields(expression: str, wildcard: bool) -> None:
    assert parse_expression(expression).is_wildcard is wildcard


@pytest.mark.parametrize(("macro", "equivalent"), sorted(MACROS.items()))
def test_macros_equal_their_expansion(macro: str, equivalent: str) -> None:
    expanded, parsed = parse_expression(equivalent), parse_expression(macro)
    assert (parsed.minutes, parsed.hours, parsed.days_of_month) == (
        expanded.minutes,
        expanded.hours,
        expanded.days_of_month,
    )
    assert (parsed.months, parsed.days_of_week, parsed.days_and, parsed.is_wildcard) == (
        expanded.months,
        expanded.days_of_week,
        expanded.days_and,
        expanded.is_wildcard,
    )


def test_tabs_and_repeated_spaces_separate_fields() -> None:
    parsed = parse_expression(" 5\t4  *\t* \t1 ")
    assert (parsed.minutes, parsed.hours, parsed.days_of_week) == (
        frozenset({5}),
        frozenset({4}),
        frozenset({1}),
    )


def test_the_or_rule_rescues_an_impossible_date() -> None:
    # Feb 31 never exists, but OR with Monday keeps every Monday of February.
    parsed = parse_expression("0 0 31 2 1")
    assert not parsed.days_and
    assert parsed.days_of_week == {1}


INVALID = [
    # (expression, field, token)
    ("", "expression", ""),
    ("   ", "expression", "   "),
    ("* * * *", "expression", "* * * *"),
    ("0 0 * * * *", "expression", "0 0 * * * *"),  # 6 fields (seconds or year)
    ("0 0 0 * * * 2026", "expression", "0 0 0 * * * 2026"),  # 7 fields
    ("@reboot", "expression", "@reboot"),
    ("@every 5m", "expression", "@every 5m"),
    ("@DAILY", "expression", "@DAILY"),  # macros are lowercase
    ("@daily *", "expression", "@daily *"),  # a macro stands alone
    ("60 * * * *", "minute", "60"),
    ("-1 * * * *", "minute", "-1"),
    ("* 24 * * *", "hour", "24"),
    ("* * 0 * *", "day_of_month", "0"),
    ("* * 32 * *", "day_of_month", "32"),
    ("* * * 0 *", "month", "0"),
    ("* * * 13 *", "month", "13"),
    ("* * * * 8", "day_of_week", "8"),
    ("* * * January *", "month", "January"),  # full names are refused
    ("* * * * Monday", "day_of_week", "Monday"),
    ("* * * * MO", "day_of_week", "MO"),
    ("* * * JANU *", "month", "JANU"),
    ("MON * * * *", "minute", "MON"),  # names only in month and weekday
    ("* * * MON *", "month", "MON"),  # a weekday name is not a month
    ("5-1 * * * *", "minute", "5-1"),  # no wrap-around
    ("* * * * FRI-MON", "day_of_week", "FRI-MON"),
    ("* * * DEC-JAN *", "month", "DEC-JAN"),
    ("* * * * SUN-SAT-", "day_of_week", "SUN-SAT-"),
    ("* * * * 7-1", "day_of_week", "7-1"),  # only Sunday written 0/SUN ends a range as 7
    ("* * 5-0 * *", "day_of_month", "5-0"),
    ("*/0 * * * *", "minute", "*/0"),
    ("1-5/0 * * * *", "minute", "1-5/0"),
    ("*/ * * * *", "minute", "*/"),
    ("*/-1 * * * *", "minute", "*/-1"),
    ("*/1.5 * * * *", "minute", "*/1.5"),
    ("5/15 * * * *", "minute", "5/15"),  # V/S: refused (documented)
    ("1,,2 * * * *", "minute", "1,,2"),
    (",1 * * * *", "minute", ",1"),
    ("1, * * * *", "minute", "1,"),
    ("*-5 * * * *", "minute", "*-5"),
    ("1-2-3 * * * *", "minute", "1-2-3"),
    ("1- * * * *", "minute", "1-"),
    ("** * * * *", "minute", "**"),
    ("* * L * *", "day_of_month", "L"),
    ("* * 15W * *", "day_of_month", "15W"),
    ("* * LW * *", "day_of_month", "LW"),
    ("* * * * 5L", "day_of_week", "5L"),
    ("* * * * MON#2", "day_of_week", "MON#2"),
    ("* * ? * MON", "day_of_month", "?"),
    ("H * * * *", "minute", "H"),
    ("H(0-29) * * * *", "minute", "H(0-29)"),
    ("0 0 30 2 *", "day_of_month", "30"),  # impossible dates
    ("0 0 31 4,6,9,11 *", "day_of_month", "31"),
    ("0 0 30-31 2 */2", "day_of_month", "30-31"),  # dow starts with *: AND, still impossible
    ("0\n0 * * * *", "minute", "0\n0"),  # only spaces and tabs separate fields
    ("٣ * * * *", "minute", "٣"),  # only ASCII digits
    ("*/99999999999 * * * *", "minute", "*/99999999999"),
]


@pytest.mark.parametrize(("expression", "field", "token"), INVALID)
def test_invalid_expressions_name_field_and_token(expression: str, field: str, token: str) -> None:
    with pytest.raises(InvalidScheduleExpression) as caught:
        parse_expression(expression)
    error = caught.value
    assert (error.field, error.token) == (field, token.strip(" \t") or token)
    assert str(error) == f"{field}: {error.reason} (token {error.token!r})"
    assert "\n" not in str(error).replace("\\n", "")  # one line, safe for stderr and JSON


def test_over_long_expressions_are_refused_without_echoing_them() -> None:
    with pytest.raises(InvalidScheduleExpression) as caught:
        parse_expression("0," * 600 + "0 * * * *")
    assert caught.value.field == "expression"
    assert len(str(caught.value)) < 120


@pytest.mark.parametrize(
    "zone",
    ["UTC", "EST5EDT", "America/New_York", "Asia/Kathmandu", "Etc/GMT-14", "Etc/GMT+12"],
)
def test_iana_zones_load(zone: str) -> None:
    assert load_zone(zone).key == zone


@pytest.mark.parametrize(
    "zone",
    [
        "Etc/GMT+15",
        "Mars/Olympus_Mons",
        "America",  # a directory
        "/etc/passwd",
        "../../etc/passwd",
        "America/../UTC",
        "./UTC",
        "",
        "localtime",
        "posixrules",
        "Factory",
        "right/UTC",
        "posix/UTC",
        "UTC ",
        "utc\n",
        "A" * 200,
    ],
)
def test_bad_zones_are_refused_naming_the_timezone_field(zone: str) -> None:
    with pytest.raises(InvalidScheduleExpression) as caught:
        load_zone(zone)
    assert caught.value.field == "timezone"
    assert str(caught.value).startswith("timezone: ")


@pytest.mark.parametrize(
    ("zone", "meant"),
    [
        ("America/NewYork", ["America/New_York"]),
        ("AMERICA/NEW_YORK", ["America/New_York"]),
        ("america/new-york", ["America/New_York"]),
        ("UTC ", ["UTC"]),
        ("posix/Europe/Paris", ["Europe/Paris"]),
        ("Europe/Pariss", ["Europe/Paris"]),
        ("Mars/Olympus_Mons", []),
        ("A" * 200, []),
    ],
)
def test_an_unknown_zone_suggests_the_keys_meant(zone: str, meant: list[str]) -> None:
    with pytest.raises(InvalidScheduleExpression) as caught:
        load_zone(zone)
    hint = f"did you mean {' or '.join(meant)}?" if meant else ""
    assert caught.value.hint == hint
    if meant:
        assert str(caught.value).endswith(f"; {hint}")
    else:
        assert "did you mean" not in str(caught.value)
    assert caught.value.described == str(caught.value).removeprefix("timezone: ")
