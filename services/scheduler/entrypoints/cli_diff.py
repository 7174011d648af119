"""`scheduler diff -f FILE|DIR [-f ...] [-R] [--prune-label k=v]...`: what `scheduler apply`
would do, as its plan, without changing anything (the same request with `dry_run: true`). Exit
status as `kubectl diff`: 0 nothing would change, 1 something would, 2 an error."""

from __future__ import annotations

import argparse
import sys

from scheduler.entrypoints.cli_apply import add_file_arguments, origin_note, read_definitions, send
from scheduler.entrypoints.clikit import plan, remote
from schedulerclient import Client

PROG = "scheduler diff"
EXIT_CHANGES = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_file_arguments(parser)


def run(args: argparse.Namespace) -> int:
    definitions = read_definitions(PROG, args)
    if definitions is None:
        return remote.EXIT_ERROR

    def call(client: Client) -> int:
        answer = send(client, args, definitions, dry_run=True)
        sys.stdout.write("\n".join(plan.plan_lines(answer)) + "\n")
        return EXIT_CHANGES if plan.has_changes(answer) else 0

    return remote.report(PROG, args, call, origin_note(definitions))
