"""`scheduler apply -f FILE|DIR [-f ...] [-R] [--prune-label k=v]... [--dry-run]
[--show-secrets] [-o plan|json|yaml]`: send every definition read (clikit.definition_files) to
`POST /v1/schedules/apply` in one call and print the plan the API answers (clikit.plan), then a
summary line. All or nothing: a refused apply changes nothing and exits 2, naming each invalid
definition by its file and document. Secrets a create generated are printed only with
`--show-secrets`. `scheduler diff` (cli_diff) sends the same request as a dry run.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from scheduler.entrypoints.clikit import plan, remote
from scheduler.entrypoints.clikit.definition_files import (
    DefinitionFileError,
    Definitions,
    load_definitions,
)
from scheduler.entrypoints.clikit.output import dump
from schedulerclient import Client

PROG = "scheduler apply"
# `schedules[3].cron` (the contract's spelling) or `schedules.3.cron` (pydantic's location).
_FIELD = re.compile(r"^schedules(?:\[(\d+)\]|\.(\d+))(?:\.|$)")


def add_file_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE|DIR",
        help="a YAML or JSON file, or a directory of *.yaml, *.yml, *.json files (repeatable)",
    )
    parser.add_argument(
        "-R", "--recursive", action="store_true", help="read directories' subdirectories too"
    )
    parser.add_argument(
        "--prune-label",
        action="append",
        default=[],
        metavar="K=V",
        help="delete the schedules carrying every such label whose key is not in the files "
        "(repeatable; a schedule without a key is never deleted)",
    )
    remote.add_connection_arguments(parser, timeout=remote.APPLY_TIMEOUT_SECONDS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_file_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    parser.add_argument(
        "--show-secrets",
        action="store_true",
        help="print the signing secrets the API generated for created schedules (shown once)",
    )
    parser.add_argument("-o", "--output", choices=("plan", "json", "yaml"), default="plan")


def prune_of(pairs: list[str]) -> dict[str, Any] | None:
    if not pairs:
        return None
    labels: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise remote.CliError(f"--prune-label: expected KEY=VALUE, got {pair[:100]!r}")
        labels[name] = value
    return {"labels": labels}


def origin_note(definitions: Definitions) -> remote.FieldNote:
    """`schedules[3].cron` -> the file and document definition 3 came from."""

    def note(field: str) -> str | None:
        match = _FIELD.match(field)
        if match is None:
            return None
        index = int(match.group(1) or match.group(2))
        origins = definitions.origins
        return str(origins[index]) if 0 <= index < len(origins) else None

    return note


def read_definitions(prog: str, args: argparse.Namespace) -> Definitions | None:
    try:
        return load_definitions(args.filename, recursive=args.recursive)
    except DefinitionFileError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None


def send(
    client: Client, args: argparse.Namespace, definitions: Definitions, *, dry_run: bool
) -> dict[str, Any]:
    """The API's apply answer as JSON data."""
    answer = client.apply_schedules(
        schedules=definitions.items, prune=prune_of(args.prune_label), dry_run=dry_run
    )
    data = remote.data_of(answer)
    return data if isinstance(data, dict) else {}


def run(args: argparse.Namespace) -> int:
    definitions = read_definitions(PROG, args)
    if definitions is None:
        return remote.EXIT_ERROR

    def call(client: Client) -> int:
        answer = send(client, args, definitions, dry_run=args.dry_run)
        print_answer(answer, args.output, show_secrets=args.show_secrets)
        return 0

    return remote.report(PROG, args, call, origin_note(definitions))


def print_answer(answer: dict[str, Any], fmt: str, *, show_secrets: bool) -> None:
    out = sys.stdout
    if fmt != "plan":
        dump(answer if show_secrets else plan.without_secrets(answer), fmt, out)
    else:
        out.write("\n".join([*plan.plan_lines(answer), plan.summary_line(answer)]) + "\n")
        if show_secrets:
            out.write("".join(f"{line}\n" for line in plan.secret_lines(answer)))
    note = None if show_secrets else plan.hidden_secrets_note(answer)
    if note:
        print(f"{PROG}: {note}", file=sys.stderr)
