"""`scheduler schedules list|get|create|update|delete|pause|resume|trigger|runs|replay|ledger|
versions`: the schedule API from the command line (DESIGN.md §7b), through `schedulerclient`.

A schedule is named by its id or by `key:KEY`. `-o table` (the default) prints a compact aligned
table, `-o json`/`-o yaml` the API's objects. A signing secret a create (or an update that makes
an event schedule a webhook) returns is printed only with `--show-secrets`. A refused call is the
problem's detail on one line of stderr, exit 2 (clikit.remote).
"""

from __future__ import annotations

import argparse

from scheduler.entrypoints.clikit import remote, schedule_actions
from scheduler.entrypoints.clikit.output import FORMATS

PROG = "scheduler schedules"
MAX_LIST = 10_000  # rows one `list` or `runs` prints at most (100 pages)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="schedules_command", required=True, metavar="COMMAND")
    for name, help_text, extra in _COMMANDS:
        p = sub.add_parser(name, help=help_text)
        extra(p)
        p.add_argument("-o", "--output", choices=FORMATS, default="table")
        remote.add_connection_arguments(p)


def run(args: argparse.Namespace) -> int:
    name = args.schedules_command
    action = schedule_actions.ACTIONS[name]
    return remote.report(f"{PROG} {name}", args, lambda client: action(args, client))


def _ref(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", metavar="ID|key:KEY")


def _limit(p: argparse.ArgumentParser, default: int) -> None:
    p.add_argument(
        "--limit",
        type=_bounded_int(1, MAX_LIST),
        default=default,
        help=f"print at most this many (1..{MAX_LIST}, default {default})",
    )


def _bounded_int(low: int, high: int) -> type[int]:
    def parse(text: str) -> int:
        if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}")
        return int(text)

    return parse  # type: ignore[return-value]


def _list(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-l",
        "--label",
        action="append",
        default=[],
        metavar="K=V|K",
        help="only schedules whose label K equals V (K=V) or that have a label K (repeatable)",
    )
    p.add_argument("--key", help="only the schedule with this key")
    p.add_argument("--state", choices=("active", "paused", "completed"))
    p.add_argument("--action", dest="kind", choices=("webhook", "event"))
    _limit(p, 500)


def _file(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--filename", required=True, help="a YAML or JSON file: one definition")
    p.add_argument("--show-secrets", action="store_true", help="print a returned signing secret")


def _update(p: argparse.ArgumentParser) -> None:
    _ref(p)
    p.add_argument(
        "-f", "--filename", required=True, help="a YAML or JSON file: the fields to change"
    )
    p.add_argument("--show-secrets", action="store_true", help="print a returned signing secret")


def _refs(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedules", nargs="+", metavar="ID|key:KEY")


def _pause(p: argparse.ArgumentParser) -> None:
    _ref(p)
    p.add_argument("--reason", help="why (shown with the schedule)")


def _runs(p: argparse.ArgumentParser) -> None:
    _ref(p)
    p.add_argument(
        "--status",
        choices=("pending", "in_progress", "retrying", "succeeded", "failed", "skipped"),
    )
    _limit(p, 50)


def _replay(p: argparse.ArgumentParser) -> None:
    _ref(p)
    p.add_argument("run_id", metavar="RUN_ID")


def _ledger(p: argparse.ArgumentParser) -> None:
    _ref(p)
    p.add_argument("--from", dest="from_", metavar="RFC3339", help="window start")
    p.add_argument("--to", metavar="RFC3339", help="window end (at most 31 days after --from)")


_COMMANDS = [
    ("list", "list schedules (filters: --label, --key, --state, --action)", _list),
    ("get", "show one schedule", _ref),
    ("create", "create a schedule from a file", _file),
    ("update", "change some fields of a schedule", _update),
    ("delete", "delete schedules", _refs),
    ("pause", "pause a schedule", _pause),
    ("resume", "resume a paused schedule", _ref),
    ("trigger", "run a schedule now, outside its plan", _ref),
    ("runs", "a schedule's runs, newest first", _runs),
    ("replay", "run one of a schedule's runs again", _replay),
    ("ledger", "what happened to each occurrence in a window", _ledger),
    ("versions", "a schedule's versions: who changed what, when", _ref),
]
