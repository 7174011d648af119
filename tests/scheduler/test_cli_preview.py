"""`scheduler preview` through the installed console script, as an operator runs it."""

from __future__ import annotations

import itertools
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "scheduler"


def preview(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "preview", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_prints_exactly_n_lines_across_a_spring_forward_gap() -> None:
    result = preview(
        "--cron", "30 2 * * *", "--tz", "America/New_York",
        "--after", "2026-03-07T12:00:00Z", "--count", "3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
    ]
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("shift", ["2026-03-08T03:00:00-04:00 shifted", "2026-03-09T02:30:00-04:00"]),
        ("skip", ["2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"]),
        ("literal", ["2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"]),
    ],
)
def test_explain_annotates_lines_dst_touched(policy: str, expected: list[str]) -> None:
    result = preview(
        "--cron", "30 2 * * *", "--tz", "America/New_York", "--dst-policy", policy,
        "--after", "2026-03-07T12:00:00Z", "--count", "2", "--explain",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected


def test_explain_shows_both_passes_under_literal() -> None:
    result = preview(
        "--cron", "30 1 * * *", "--tz", "America/New_York", "--dst-policy", "literal",
        "--after", "2026-10-31T12:00:00Z", "--count", "3", "--explain",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "2026-11-01T01:30:00-04:00 first_pass",
        "2026-11-01T01:30:00-05:00 second_pass",
        "2026-11-02T01:30:00-05:00",
    ]
    plain = preview(
        "--cron", "30 1 * * *", "--tz", "America/New_York", "--dst-policy", "literal",
        "--after", "2026-10-31T12:00:00Z", "--count", "3",
    )  # fmt: skip
    assert plain.stdout.splitlines() == [line.split(" ")[0] for line in result.stdout.splitlines()]


def test_defaults_to_ten_occurrences_after_now() -> None:
    before = datetime.now(UTC)
    result = preview("--cron", "@hourly", "--tz", "UTC")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 10
    stamps = [datetime.fromisoformat(line).timestamp() for line in lines]
    # The next whole hour after the moment the command started, then hourly.
    assert before.timestamp() < stamps[0] <= before.timestamp() + 3600
    assert stamps[0] % 3600 == 0
    assert [b - a for a, b in itertools.pairwise(stamps)] == [3600] * 9


def test_large_counts_stream_quickly() -> None:
    result = preview(
        "--cron", "*/5 * * * *", "--tz", "Europe/London",
        "--after", "2026-01-01T00:00:00Z", "--count", "100000",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 100_000
    assert lines[0] == "2026-01-01T00:05:00+00:00"
    # 100,000 five-minute steps = 347 days 5h20m, crossing both 2026 London transitions
    # (the repeated hour adds 12 occurrences, the skipped hour removes 12: net zero).
    assert lines[-1] == "2026-12-14T05:20:00+00:00"


def test_ends_quietly_at_the_end_of_the_calendar() -> None:
    result = preview(
        "--cron", "0 0 1 * *", "--tz", "UTC", "--after", "9999-10-15T00:00:00Z", "--count", "5"
    )
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["9999-11-01T00:00:00+00:00", "9999-12-01T00:00:00+00:00"]


def test_a_cron_the_policy_starves_exits_2_naming_the_bound() -> None:
    # The second Sunday of March at 02:30 is inside New York's spring-forward gap every year:
    # with `skip` it never fires. The engine gives up after MAX_GAP_YEARS (50) instead of
    # walking to the year 9999.
    result = preview(
        "--cron", "30 2 8-14 3 */7", "--tz", "America/New_York", "--dst-policy", "skip",
        "--after", "2026-01-01T00:00:00Z", "--count", "3",
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "scheduler preview: cron: fires less than once in 50 years: no occurrence within 50 "
        "years after 2026-01-01T00:00:00+00:00 with dst_policy skip"
    ]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--cron", "0 0 * * * *", "--tz", "UTC"], "expression: expected 5 fields"),
        (["--cron", "0 0 30 2 *", "--tz", "UTC"], "day_of_month:"),
        (["--cron", "* * * JANUARY *", "--tz", "UTC"], "(token 'JANUARY')"),
        (["--cron", "@reboot", "--tz", "UTC"], "(token '@reboot')"),
        (["--cron", "* * * * *", "--tz", "Etc/GMT+15"], "timezone: unknown time zone"),
        (["--cron", "* * * * *", "--tz", "/etc/localtime"], "timezone:"),
        (["--cron", "* * * * *", "--tz", "America/NewYork"], "did you mean America/New_York?"),
        (["--cron", "* * * * *", "--tz", "UTC", "--after", "yesterday"], "--after:"),
        (["--cron", "* * * * *", "--tz", "UTC", "--after", "2026-01-01T00:00"], "needs an offset"),
        (["--cron", "* * * * *", "--tz", "UTC", "--count", "0"], "--count:"),
        (["--cron", "* * * * *", "--tz", "UTC", "--count", "1000001"], "--count:"),
        (["--cron", "* * * * *", "--tz", "UTC", "--count", "-3"], "--count:"),
        (["--cron", "* * * * *", "--tz", "UTC", "--count", "ten"], "--count:"),
        (["--cron", "* * * * *", "--tz", "UTC", "--dst-policy", "later"], "--dst-policy:"),
    ],
)
def test_invalid_input_exits_2_with_one_line(args: list[str], needle: str) -> None:
    result = preview(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0], result.stderr
