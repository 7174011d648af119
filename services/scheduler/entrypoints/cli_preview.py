"""`scheduler preview --cron EXPR --tz ZONE [--after ISO8601] [--count N] [--dst-policy P]
[--explain]`.

Prints exactly N occurrences strictly after `--after` (default: now), one per line, as local time
with the offset (`2026-03-08T03:00:00-04:00`), streamed so large N stays fast. `--dst-policy`
(`shift`, `skip`, `literal`; DESIGN.md §7a) chooses what a fixed schedule does across DST;
`--explain` appends ` shifted`, ` first_pass` or ` second_pass` to a line DST touched. Invalid
input (expression, zone, `--after`, `--count` outside 1..MAX_COUNT, policy) exits 2 with one line
on stderr.
If the calendar ends (year 9999) before N occurrences, it prints what exists and exits 0. If the
engine gives up first (no occurrence within MAX_GAP_YEARS, e.g. `30 2 8-14 3 */7` with `skip` in
New York), it prints what exists, says so on stderr in one line (field `cron`, as the API's 422)
and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import NoReturn

from scheduler.domain.expression import InvalidScheduleExpression
from scheduler.domain.occurrences import MAX_GAP_YEARS, Recurrence, format_occurrence
from scheduler.domain.policies import DstPolicy

DEFAULT_COUNT = 10
# A bound on output: a million lines is ~26 MB and a few seconds; more is a mistake, not a preview.
MAX_COUNT = 1_000_000
_FLUSH_EVERY = 4096  # lines per write: large N is written in chunks, not line by line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cron", required=True, help="five-field expression or @macro")
    parser.add_argument("--tz", required=True, help="IANA time zone, e.g. Africa/Addis_Ababa")
    parser.add_argument(
        "--after",
        help="ISO 8601 instant with an offset or Z (default: now); occurrences are strictly after",
    )
    parser.add_argument(
        "--count",
        default=str(DEFAULT_COUNT),
        help=f"how many occurrences (1..{MAX_COUNT}, default {DEFAULT_COUNT})",
    )
    parser.add_argument(
        "--dst-policy",
        default=DstPolicy.SHIFT.value,
        help="what a fixed schedule does across DST: shift (default), skip or literal",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="append shifted / first_pass / second_pass to occurrences DST touched",
    )


def _fail(message: str) -> NoReturn:
    print(f"scheduler preview: {message}", file=sys.stderr)
    raise SystemExit(2)


def _parse_after(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    try:
        after = datetime.fromisoformat(text)
    except ValueError:
        _fail(f"--after: not an ISO 8601 date-time (token {text!r})")
    if after.tzinfo is None:
        _fail(f"--after: needs an offset or Z, e.g. 2026-03-08T00:00:00Z (token {text!r})")
    return after


def _parse_count(text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_COUNT:
        _fail(f"--count: must be a whole number from 1 to {MAX_COUNT} (token {text!r})")
    return int(text)


def _parse_policy(text: str) -> DstPolicy:
    try:
        return DstPolicy(text)
    except ValueError:
        choices = ", ".join(p.value for p in DstPolicy)
        _fail(f"--dst-policy: must be one of {choices} (token {text!r})")


def run(args: argparse.Namespace) -> int:
    policy = _parse_policy(args.dst_policy)
    try:
        recurrence = Recurrence.parse(args.cron, args.tz, policy)
    except InvalidScheduleExpression as exc:
        _fail(str(exc))
    count = _parse_count(args.count)
    after = _parse_after(args.after)
    out = sys.stdout
    lines: list[str] = []
    explain = args.explain
    printed, last = 0, after
    for occurrence in islice(recurrence.iter_after(after), count):
        printed, last = printed + 1, occurrence
        line = format_occurrence(occurrence)
        if explain:
            annotation = recurrence.annotate(occurrence)
            if annotation is not None:
                line = f"{line} {annotation.value}"
        lines.append(line)
        if len(lines) >= _FLUSH_EVERY:
            out.write("\n".join(lines) + "\n")
            lines.clear()
    if lines:
        out.write("\n".join(lines) + "\n")
    out.flush()
    if printed < count and _before_calendar_end(last):
        _fail(
            f"cron: fires less than once in {MAX_GAP_YEARS} years: no occurrence within "
            f"{MAX_GAP_YEARS} years after {format_occurrence(last)} "
            f"with dst_policy {policy.value}"
        )
    return 0


def _before_calendar_end(last: datetime) -> bool:
    """Whether MAX_GAP_YEARS after `last` still lies before the year 9999 ends (then the engine
    stopped because it gave up, not because the calendar ended)."""
    try:
        return (last + timedelta(days=(MAX_GAP_YEARS + 1) * 366)).year < 9999
    except OverflowError:
        return False
