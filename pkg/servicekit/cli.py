"""A console script made of lazily imported subcommands (`scheduler`, `notification`).

Each subcommand lives in its own module with `add_arguments(parser)` and `run(args) -> int`; only
the chosen one is imported, so e.g. `scheduler preview` never pays for the web stack.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping, Sequence

Subcommands = Mapping[str, tuple[str, str]]
"""name -> (module name under `package`, help text)."""


def run_subcommands(
    prog: str, package: str, subcommands: Subcommands, argv: Sequence[str] | None = None
) -> int:
    """Parse `argv` (default: sys.argv[1:]) and run the chosen subcommand; its exit status."""
    parser = argparse.ArgumentParser(prog=prog)
    sub = parser.add_subparsers(dest="command", required=True)
    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in args_list if not a.startswith("-")), None)
    for name, (module_name, help_text) in subcommands.items():
        p = sub.add_parser(name, help=help_text)
        # Only the chosen subcommand's module is imported (and only it defines its arguments).
        if name == chosen:
            module = importlib.import_module(f"{package}.{module_name}")
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    args = parser.parse_args(args_list)
    result: int = args._run(args)
    return result
