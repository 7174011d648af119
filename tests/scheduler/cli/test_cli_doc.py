"""docs/cli.md shows only commands the CLI accepts: every `scheduler …` line of its `sh` blocks
parses with the subcommand's own arguments."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path

import pytest

from scheduler.entrypoints.cli import SUBCOMMANDS

DOC = Path(__file__).resolve().parents[3] / "docs" / "cli.md"


def _commands() -> list[list[str]]:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    found = []
    for line in "\n".join(blocks).splitlines():
        for part in re.findall(r"(?:^|\$\()(scheduler [^)]*)", line):
            found.append(shlex.split(part)[1:])
    return found


def test_the_doc_shows_the_commands() -> None:
    shown = {argv[0] for argv in _commands()}
    assert {"apply", "diff", "schedules", "token"} <= shown


@pytest.mark.parametrize("argv", _commands(), ids=" ".join)
def test_each_command_parses(argv: list[str]) -> None:
    module_name, _ = SUBCOMMANDS[argv[0]]
    parser = argparse.ArgumentParser(prog=f"scheduler {argv[0]}")
    importlib.import_module(f"scheduler.entrypoints.{module_name}").add_arguments(parser)
    parser.parse_args(argv[1:])  # exits 2 (failing the test) on an unknown flag or value
